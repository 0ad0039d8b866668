"""Start-up checks in the TaskRunner (the process that builds the checkpoint callback before any model loads and
later computes every advantage, verl 0.9.1 V1: TaskRunnerV1.run -> PPOTrainer.__init__ -> build_checkpoint_callback,
then init() loads the models, then fit() -> _compute_advantage in the same process).

- `ebpo` missing from verl's registry: EBPOCheckpointCallback registers it and says once, in one line, the likely
  causes (VERL_USE_EXTERNAL_PLUGINS, the package not installed on that node) and the fix.
- `ebpo` taken by another function: the callback stops the run with one error line.
- A running prior without the callback, inside verl's trainer: one warning that a resume restarts the prior.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap

import pytest

import verl
from verl.trainer.ppo.checkpoint_callback import build_checkpoint_callback
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, get_adv_estimator_fn
from verl_ebpo.advantage import reset_prior
from verl_ebpo.advantage import verl_glue

CONFIG_DIR = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
EBPO_RUN = ("algorithm.adv_estimator=ebpo", "trainer.checkpoint_callback_class=verl_ebpo.EBPOCheckpointCallback",
            "trainer.resume_mode=disable")


def compose(*overrides):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return hydra_compose("ppo_trainer", overrides=list(overrides))


@pytest.fixture(autouse=True)
def clean_state(monkeypatch):
    reset_prior()
    yield  # monkeypatch then restores verl's registry as it was
    reset_prior()


def _warnings(caplog, needle):
    return [r for r in caplog.records if r.levelno == logging.WARNING and needle in r.getMessage()]


# -- the estimator is not registered ------------------------------------------------------------------------


def test_plugins_turned_off_in_a_fresh_process_the_callback_registers_ebpo_and_says_why():
    """The real thing: VERL_USE_EXTERNAL_PLUGINS=none, so `import verl` loads no plugin; verl builds the callback."""
    code = textwrap.dedent(f"""
        import os
        from hydra import compose, initialize_config_dir
        import verl
        from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, get_adv_estimator_fn
        from verl.trainer.ppo.checkpoint_callback import build_checkpoint_callback
        assert "ebpo" not in ADV_ESTIMATOR_REGISTRY
        with initialize_config_dir(config_dir={CONFIG_DIR!r}, version_base=None):
            cfg = compose("ppo_trainer", overrides={list(EBPO_RUN)!r})
        build_checkpoint_callback(cfg)
        print(get_adv_estimator_fn("ebpo").__module__)
    """)
    env = {**os.environ, "VERL_USE_EXTERNAL_PLUGINS": "none", "PYTHONPATH": os.getcwd()}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "verl_ebpo.advantage.verl_glue"
    lines = [line for line in out.stderr.splitlines() if "'ebpo' was not registered" in line]
    assert len(lines) == 1, out.stderr[-2000:]
    assert "VERL_USE_EXTERNAL_PLUGINS" in lines[0] and "pip install verl-ebpo" in lines[0]


def test_removed_from_the_registry_the_callback_registers_it_before_any_model_loads(caplog, monkeypatch):
    monkeypatch.delitem(ADV_ESTIMATOR_REGISTRY, "ebpo")
    with pytest.raises(ValueError, match="Unknown advantage estimator"):  # what verl would hit at step 1
        get_adv_estimator_fn("ebpo")
    with caplog.at_level(logging.WARNING):
        build_checkpoint_callback(compose(*EBPO_RUN))
    assert get_adv_estimator_fn("ebpo") is verl_glue.compute_ebpo_outcome_advantage
    (record,) = _warnings(caplog, "'ebpo' was not registered")
    assert "\n" not in record.getMessage() and "VERL_USE_EXTERNAL_PLUGINS" in record.getMessage()
    # a second trainer in the same process: registered now, nothing more said
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        build_checkpoint_callback(compose(*EBPO_RUN))
    assert not _warnings(caplog, "'ebpo' was not registered")


def test_another_estimator_leaves_the_registry_alone(monkeypatch):
    monkeypatch.delitem(ADV_ESTIMATOR_REGISTRY, "ebpo")
    build_checkpoint_callback(compose("algorithm.adv_estimator=grpo", EBPO_RUN[1], EBPO_RUN[2]))
    assert "ebpo" not in ADV_ESTIMATOR_REGISTRY


def test_ebpo_taken_by_another_function_stops_the_run(monkeypatch):
    def impostor(**kwargs):
        raise AssertionError("never called")

    monkeypatch.setitem(ADV_ESTIMATOR_REGISTRY, "ebpo", impostor)
    with pytest.raises(ValueError, match="already been registered") as err:  # verl's own refusal
        build_checkpoint_callback(compose(*EBPO_RUN))
    assert "impostor" in str(err.value) and "compute_ebpo_outcome_advantage" in str(err.value)
    assert ADV_ESTIMATOR_REGISTRY["ebpo"] is impostor  # never overwritten


def test_the_ray_runtime_env_loads_the_plugin_on_a_node_without_the_package(tmp_path):
    """recipes/runtime_env.yaml's env_vars, in a process that starts in the job's copy of the working dir, with
    no `verl.plugins` entry point (plugins off): `import verl` alone registers `ebpo`."""
    import yaml

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = yaml.safe_load(open(os.path.join(root, "recipes", "runtime_env.yaml")))
    env = {**os.environ, **spec["env_vars"], "VERL_USE_EXTERNAL_PLUGINS": "none"}
    env.pop("PYTHONPATH", None)  # found only because the process starts in the working dir, as Ray's workers do
    code = ("import sys, verl\n"  # python -c: the working dir is sys.path[0]
            "from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY as R\n"
            "print(R['ebpo'].__module__, sys.modules['verl_ebpo'].__file__)")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    module, path = out.stdout.split()
    assert module == "verl_ebpo.advantage.verl_glue" and path.startswith(root)
