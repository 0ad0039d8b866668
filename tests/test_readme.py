"""The README's commands stay true: the GPU command composes in verl, the set-up commands keep their markers."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def _block(after: str) -> str:
    m = re.search(re.escape(after) + r".*?```bash\n(.*?)```", README, re.S)
    assert m, after
    return m.group(1)


def test_readme_is_a_landing_page():
    assert len(README.split()) <= 1500
    for marker in ("<!-- main-command -->", "<!-- /main-command -->", "<!-- test-command -->", "<!-- /test-command -->"):
        assert README.count(marker) == 1, marker
    for doc in re.findall(r"\]\((docs/[a-z_]+\.md)", README):
        assert (Path(__file__).resolve().parents[1] / doc).is_file(), doc


def _composed_config(argv: list[str]):
    """The config verl's own entry point composes from `python3 -m verl.trainer.main_ppo ARGV` (its `--cfg job`)."""
    import contextlib
    import io

    import yaml
    from omegaconf import OmegaConf

    import verl.trainer.main_ppo as main_ppo

    saved, buf = sys.argv, io.StringIO()
    sys.argv = ["verl.trainer.main_ppo", *argv[2:], "--cfg", "job"]
    try:
        with contextlib.redirect_stdout(buf):
            main_ppo.main()
    finally:
        sys.argv = saved
    return OmegaConf.create(yaml.safe_load(buf.getvalue()))


def _gpu_command_argv(tmp_path) -> list[str]:
    """The README's GPU block run by bash exactly as pasted, with `python3` and `mkdir` replaced by shell
    functions that record their arguments (nothing is launched or created)."""
    block = _block("## One complete GPU run")
    stub = ('python3() { printf "%s\\n" "$@" > "$ARGV_OUT"; }\nmkdir() { printf "%s\\n" "$@" > "$MKDIR_OUT"; }\n'
            'verl-ebpo() { printf "%s\\n" "$@" > "$PRE_OUT"; }\n')
    env = {"PATH": os.environ["PATH"], "HOME": "/home/researcher", "ARGV_OUT": str(tmp_path / "argv"),
           "MKDIR_OUT": str(tmp_path / "mkdir"), "PRE_OUT": str(tmp_path / "pre")}
    out = subprocess.run(["bash", "-euc", stub + block], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "mkdir").read_text().split() == ["-p", "/shared/ckpts/qwen3_8b-ebpo-topic"]
    argv = (tmp_path / "argv").read_text().splitlines()
    pre = (tmp_path / "pre").read_text().splitlines()  # verl-ebpo preflight runs first, on the same overrides
    assert pre[:5] == ["preflight", "--shared-dir", "/shared", "--gpu-memory-gb", "141"] and pre[5:] == argv[2:]
    return argv


def test_the_gpu_command_passes_verls_startup_checks_with_every_feature(tmp_path):
    """Composed by verl's own entry point and checked by `validate_config` exactly as `main_ppo.main` calls it
    (with verl's need_reference_policy / need_critic): what verl does before it starts Ray."""
    import contextlib
    import io
    import warnings

    import yaml
    from omegaconf import OmegaConf
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    import verl.trainer.main_ppo as main_ppo

    argv = _gpu_command_argv(tmp_path)
    assert argv[:2] == ["-m", "verl.trainer.main_ppo"]
    cfg = _composed_config(argv)
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Disabled critic")
        validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Disabled critic")
        assert need_reference_policy(cfg) and not need_critic(cfg)  # the KL loss needs the reference model
    assert cfg.algorithm.adv_estimator == "ebpo"
    assert cfg.trainer.checkpoint_callback_class == "verl_ebpo.EBPOCheckpointCallback"
    assert cfg.reward.custom_reward_function.path == "pkg://verl_ebpo.rewards"
    assert cfg.data.custom_cls.name == "TopicOrderedDataset" and cfg.data.shuffle is False
    # safe on several nodes: an absolute, shared checkpoint folder named by the run; verl's file logger on
    t = cfg.trainer
    assert (t.project_name, t.experiment_name) == ("verl_ebpo", "qwen3_8b-ebpo-topic")
    assert t.default_local_dir == "/shared/ckpts/qwen3_8b-ebpo-topic"
    assert list(t.logger) == ["console", "file"]
    # verl's FileLogger reads VERL_FILE_LOGGER_PATH in the TaskRunner: it gets there through ray.init's runtime
    # env (run_ppo merges ray_kwargs.ray_init.runtime_env over verl's defaults), one file per launch
    metrics = cfg.ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH
    assert re.fullmatch(re.escape(t.default_local_dir) + r"/metrics-\d{10}\.jsonl", metrics), metrics
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    merged = OmegaConf.merge(get_ppo_ray_runtime_env(cfg), cfg.ray_kwargs.ray_init.runtime_env)
    assert merged.env_vars.VERL_FILE_LOGGER_PATH == metrics


def test_verls_file_logger_writes_where_the_gpu_command_points_it(tmp_path, monkeypatch):
    from verl.utils.tracking import FileLogger

    path = tmp_path / "metrics-1.jsonl"
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    logger = FileLogger("verl_ebpo", "x")
    logger.log({"critic/score/mean": 0.5}, step=1)
    logger.finish()
    assert '"step":1' in path.read_text()


def test_readme_first_block_is_the_lines_a_verl_user_adds(tmp_path):
    """The README's first fenced block holds the lines added to one's own verl command, each commented with
    what it turns on; run by bash as pasted (python3 recording its arguments), they reach verl as overrides that its
    config composes."""
    import contextlib
    import io

    import yaml
    from omegaconf import OmegaConf

    import verl.trainer.main_ppo as main_ppo

    first = re.search(r"```(\w*)\n(.*?)```", README, re.S)
    assert first.group(1) == "bash" and "algorithm.adv_estimator=ebpo" in first.group(2)
    lines = [line for line in first.group(2).splitlines() if line.strip()]
    assert all("  # " in line for line in lines), "every line says what it turns on"
    assert [line.split("  # ")[1].split(":")[0] for line in lines[:4]] == ["required", "required", "optional",
                                                                           "optional"]
    stub = 'python3() { printf "%s\\n" "$@" > "$ARGV_OUT"; }\nYOUR_ARGS=(trainer.total_training_steps=3)\n'
    # as pasted: the required keys only; then with the optional ones added as the last line's comment says
    for extra, optional in (("", False), ('\npython3 -m verl.trainer.main_ppo "${YOUR_ARGS[@]}" "${EBPO[@]}" '
                                          '"${OPTIONAL[@]}"', True)):
        out = subprocess.run(["bash", "-euc", stub + first.group(2) + extra], capture_output=True, text=True,
                             timeout=600, env={"PATH": os.environ["PATH"], "ARGV_OUT": str(tmp_path / "argv")})
        assert out.returncode == 0, out.stderr
        argv = (tmp_path / "argv").read_text().splitlines()
        assert argv[:3] == ["-m", "verl.trainer.main_ppo", "trainer.total_training_steps=3"]
        cfg = _composed_config(argv)
        assert cfg.algorithm.adv_estimator == "ebpo"
        assert cfg.trainer.checkpoint_callback_class == "verl_ebpo.EBPOCheckpointCallback"
        ours = (cfg.reward.custom_reward_function.path, cfg.reward.custom_reward_function.name) == (
            "pkg://verl_ebpo.rewards", "compute_score")  # verl's default name: the package's function
        topic = cfg.data.custom_cls.name == "TopicOrderedDataset" and cfg.data.shuffle is False
        assert ours == topic == optional


def test_the_test_command_prints_the_slowest_tests_and_ci_runs_the_slow_ones_after_it():
    assert _block("<!-- test-command -->").rstrip().endswith("python -m pytest -q -n 2 --dist loadgroup --durations=15")
    ci = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    assert "SLOW=${SLOW:-python -m pytest -q -n 2 --dist loadgroup -m slow --durations=15}" in ci
    assert "`-m slow`: other trainer launches (CI runs them after: `.ci/run`)" in README


@pytest.mark.parametrize("test_rc, slow_rc, expected", [
    (0, 0, 0), (1, 0, 1), (0, 1, 1), (1, 2, 1), (5, 0, 5), (0, 5, 0),
])
def test_ci_runs_the_readme_command_then_the_slow_tests_and_fails_if_either_fails(tmp_path, test_rc, slow_rc, expected):
    """.ci/run runs the README's test command, then the slow tests, whatever the first gave; pytest's exit 5 (no test
    collected) fails the test command and is a note for the slow run."""
    root = Path(__file__).resolve().parents[1]
    (tmp_path / ".ci").mkdir()
    (tmp_path / ".ci" / "run").write_text((root / ".ci" / "run").read_text())
    (tmp_path / "README.md").write_text(
        f"<!-- test-command -->\n```bash\necho test-ran >> log; exit {test_rc}\n```\n<!-- /test-command -->\n")
    env = {**os.environ, "SLOW": f"echo slow-ran >> log; exit {slow_rc}"}
    out = subprocess.run(["bash", str(tmp_path / ".ci" / "run")], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == expected, out.stdout + out.stderr
    assert (tmp_path / "log").read_text().split() == ["test-ran", "slow-ran"]
