"""EBPOCheckpointCallback through verl's real pieces: Hydra-composed ppo_trainer.yaml, build_checkpoint_callback,
compute_advantage on a real DataProto, and verl's own PPOTrainer._save_checkpoint / _load_checkpoint run on a
stub trainer (real save order and folder layout; real resume-folder rules to compare ours with).

Run as a script (`python tests/test_checkpoint.py resume ...`) this file is the fresh process that resumes.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import verl
from verl import DataProto
from verl.trainer.ppo.checkpoint_callback import CheckpointCallback, build_checkpoint_callback
from verl.trainer.ppo.ray_trainer import compute_advantage
from verl_ebpo.advantage import EBPOPrior, get_prior, reset_prior
from verl_ebpo.advantage.prior import Moments
from verl_ebpo import checkpoint as ckpt

CONFIG_DIR = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
CALLBACK = "trainer.checkpoint_callback_class=verl_ebpo.EBPOCheckpointCallback"
EBPO = "algorithm.adv_estimator=ebpo"


def compose(*overrides):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return hydra_compose("ppo_trainer", overrides=list(overrides))


def make_batch(step: int, n_prompts: int = 6, group: int = 4, T: int = 6) -> DataProto:
    """Step `step`'s batch, identical in every process: 0/1 scores on the last valid token, one padding row."""
    gen = torch.Generator().manual_seed(1000 + step)
    p = torch.rand(n_prompts, generator=gen)
    n = n_prompts * group + 1
    mask = torch.zeros(n, T, dtype=torch.int64)
    tlr = torch.zeros(n, T, dtype=torch.float32)
    uids = []
    for i in range(n_prompts * group):
        length = int(torch.randint(1, T + 1, (1,), generator=gen))
        mask[i, :length] = 1
        tlr[i, length - 1] = float(torch.rand(1, generator=gen) < p[i // group])
        uids.append(f"s{step}-q{i // group}")
    uids.append("pad_0")  # verl's _balance_batch padding: all-zero mask
    return DataProto.from_dict(
        tensors={"token_level_rewards": tlr, "response_mask": mask},
        non_tensors={"uid": np.array(uids, dtype=object)},
    )


def run_steps(config, steps) -> dict[int, torch.Tensor]:
    out = {}
    for step in steps:
        algo = config.algorithm
        data = compute_advantage(make_batch(step), adv_estimator=algo.adv_estimator, config=algo)
        out[step] = data.batch["advantages"].clone()
    return out


def _trainer_base():
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    return PPOTrainer


def verl_save(config, callback, step: int) -> str:
    """verl's real V1 `_save_checkpoint` on a stub trainer: actor/, data.pt, tracker, then callback.on_save."""

    def save_actor(local_path, remote_path, global_step, max_ckpt_to_keep=None):
        os.makedirs(local_path, exist_ok=True)
        with open(os.path.join(local_path, "model.bin"), "w") as f:
            f.write(str(global_step))

    stub = SimpleNamespace(
        config=config,
        global_steps=step,
        use_critic=False,
        trainer_mode="sync",
        actor_rollout_wg=SimpleNamespace(save_checkpoint=save_actor),
        train_dataloader=SimpleNamespace(state_dict=lambda: {"step": step}),
        checkpoint_callback=callback,
    )
    _trainer_base()._save_checkpoint(stub)
    return os.path.join(config.trainer.default_local_dir, f"global_step_{step}")


def verl_resume_point(config):
    """What verl's real V1 `_load_checkpoint` resumes from, on a stub trainer: (folder, step), None, or the error."""
    loaded = {}
    stub = SimpleNamespace(
        config=config,
        use_critic=False,
        trainer_mode="sync",
        actor_rollout_wg=SimpleNamespace(
            load_checkpoint=lambda local_path, del_local_after_load=False: loaded.setdefault("actor", local_path)
        ),
        train_dataloader=SimpleNamespace(load_state_dict=lambda state: None),
    )
    try:
        _trainer_base()._load_checkpoint(stub)
    except Exception as e:  # noqa: BLE001 - any failure of verl's is what we compare with
        return e
    if "actor" not in loaded:
        return None
    return os.path.dirname(loaded["actor"]), stub.global_steps


@pytest.fixture(autouse=True)
def fresh_prior():
    reset_prior()
    yield
    reset_prior()


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # default_local_dir=ckpt is relative: resolved against cwd, as verl does
    return tmp_path


# -- the callback as verl loads it ---------------------------------------------------------------------------


def test_build_checkpoint_callback_loads_our_class_by_its_documented_name(workdir):
    import verl_ebpo

    cb = build_checkpoint_callback(compose(EBPO, CALLBACK, "trainer.default_local_dir=ckpt"))
    assert type(cb) is verl_ebpo.EBPOCheckpointCallback is ckpt.EBPOCheckpointCallback
    assert isinstance(cb, CheckpointCallback)
    assert cb.active and cb.resumed_from is None


def test_the_prior_file_readers_do_not_import_verl():
    code = "import sys, verl_ebpo.advantage.prior; print('verl' in sys.modules)"  # what inspect reads through
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


# -- exact resume in a fresh process -------------------------------------------------------------------------


def _resume_in_subprocess(cwd, overrides, first, last, out_path):
    cmd = [sys.executable, os.path.abspath(__file__), "resume", str(first), str(last), str(out_path), *overrides]
    res = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return torch.load(out_path)


def test_resumed_run_in_fresh_process_equals_uninterrupted_run_bit_for_bit(workdir):
    k, n = 3, 6
    overrides = [EBPO, CALLBACK, "trainer.default_local_dir=ckpt"]

    # the uninterrupted run
    full_cfg = compose(*overrides, "trainer.resume_mode=disable")
    build_checkpoint_callback(full_cfg)
    full = run_steps(full_cfg, range(1, n + 1))
    full_state = get_prior().state_dict()

    # the interrupted run: fresh start (auto, nothing saved yet), steps 1..k, checkpoints at 2 and k
    cfg = compose(*overrides)
    cb = build_checkpoint_callback(cfg)
    assert cb.resumed_from is None and get_prior().updates == 0  # the fresh start emptied the prior
    part1 = run_steps(cfg, range(1, 3))
    verl_save(cfg, cb, 2)
    part1.update(run_steps(cfg, [k]))
    folder = verl_save(cfg, cb, k)
    state_at_k = get_prior().state_dict()
    assert sorted(os.listdir(folder)) == ["actor", "data.pt", "ebpo_prior.json"]
    assert (workdir / "ckpt" / "latest_checkpointed_iteration.txt").read_text() == str(k)
    for step in range(1, k + 1):
        assert torch.equal(part1[step], full[step])

    # a new process resumes (resume_mode=auto -> the latest, step k) and runs k+1..n
    got = _resume_in_subprocess(workdir, overrides, k + 1, n, workdir / "resumed.pt")
    assert got["resumed_from"] == [str(workdir / "ckpt" / f"global_step_{k}"), k]
    assert got["restored_state"] == state_at_k  # the same prior the interrupted run had after step k
    for step in range(k + 1, n + 1):
        assert torch.equal(got["advantages"][step], full[step]), step
    assert got["final_state"] == full_state

    # the test can fail: without the restored prior, step k+1 differs
    reset_prior()
    assert not torch.equal(run_steps(cfg, [k + 1])[k + 1], full[k + 1])


def test_resume_path_mode_and_async_save(workdir):
    """async_save: verl writes no tracker, on_save still gets a complete prior file; resume_path loads it."""
    async_save = "actor_rollout_ref.actor.checkpoint.async_save=true"
    cfg = compose(EBPO, CALLBACK, "trainer.default_local_dir=ckpt", async_save)
    cb = build_checkpoint_callback(cfg)
    run_steps(cfg, [1, 2])
    verl_save(cfg, cb, 2)
    assert not (workdir / "ckpt" / "latest_checkpointed_iteration.txt").exists()
    saved = get_prior().state_dict()
    on_disk = json.loads((workdir / "ckpt" / "global_step_2" / "ebpo_prior.json").read_text())
    assert on_disk["global_step"] == 2 and on_disk["reward"] == saved["reward"]

    reset_prior()
    cb2 = build_checkpoint_callback(compose(EBPO, CALLBACK, "trainer.resume_mode=resume_path",
                                            "trainer.resume_from_path=ckpt/global_step_2"))
    assert cb2.resumed_from == ckpt.ResumePoint(str(workdir / "ckpt" / "global_step_2"), 2)
    assert get_prior().state_dict() == saved

    # resume_mode=auto sees no tracker -> fresh start, exactly as verl
    cb3 = build_checkpoint_callback(compose(EBPO, CALLBACK, "trainer.default_local_dir=ckpt"))
    assert cb3.resumed_from is None and get_prior().updates == 0


# -- the resume folder: ours vs verl's real _load_checkpoint -----------------------------------------------


def test_resume_folder_rules_match_verls_load_checkpoint(workdir):
    for step in (1, 2):
        os.makedirs(workdir / "ckpt" / f"global_step_{step}" / "actor")
    (workdir / "empty").mkdir()
    (workdir / "ckpt" / "latest_checkpointed_iteration.txt").write_text("2")
    (workdir / "dangling").mkdir()
    (workdir / "dangling" / "latest_checkpointed_iteration.txt").write_text("7")
    cases = {
        "disable": ["trainer.resume_mode=disable"],
        "auto, relative root": ["trainer.default_local_dir=ckpt"],
        "auto, absolute root": [f"trainer.default_local_dir={workdir / 'ckpt'}"],
        "auto, no tracker": ["trainer.default_local_dir=empty"],
        "auto, tracker names a missing folder": ["trainer.default_local_dir=dangling"],
        "resume_path, relative": ["trainer.resume_mode=resume_path", "trainer.resume_from_path=ckpt/global_step_1"],
        "resume_path, absolute": ["trainer.resume_mode=resume_path",
                                  f"trainer.resume_from_path={workdir / 'ckpt' / 'global_step_1'}"],
        "resume_path, no global_step_": ["trainer.resume_mode=resume_path", "trainer.resume_from_path=ckpt"],
        "resume_path, null": ["trainer.resume_mode=resume_path"],
        "resume_path, trailing slash": ["trainer.resume_mode=resume_path",
                                        "trainer.resume_from_path=ckpt/global_step_1/"],
        "unknown mode": ["trainer.resume_mode=latest"],
    }
    expected_kind = {"disable": None, "auto, no tracker": None, "auto, tracker names a missing folder": None,
                     "resume_path, no global_step_": "error", "resume_path, null": "error",
                     "resume_path, trailing slash": "error", "unknown mode": "error"}
    for name, overrides in cases.items():
        config = compose(EBPO, *overrides)
        theirs = verl_resume_point(config)
        try:
            ours = ckpt.find_resume_checkpoint(config.trainer)
        except ckpt.EBPOCheckpointError as e:
            ours = e
        if isinstance(theirs, Exception):
            assert isinstance(ours, ckpt.EBPOCheckpointError), (name, theirs, ours)
            assert expected_kind.get(name) == "error", name
        elif theirs is None:
            assert ours is None and name in expected_kind, (name, ours)
        else:
            assert ours == ckpt.ResumePoint(*theirs), (name, theirs, ours)
            assert name not in expected_kind
    assert ckpt.find_resume_checkpoint(compose(EBPO, *cases["auto, relative root"]).trainer).step == 2


# -- missing, corrupt, mismatched prior files -----------------------------------------------------------------


def _checkpoint_at_step_2(estimator="ebpo", *extra):
    cfg = compose(f"algorithm.adv_estimator={estimator}", CALLBACK, "trainer.default_local_dir=ckpt", *extra)
    cb = build_checkpoint_callback(cfg)
    run_steps(cfg, [1, 2])
    return verl_save(cfg, cb, 2)


def test_non_ebpo_estimator_is_inert_and_ebpo_resume_from_it_is_a_clear_error(workdir, caplog):
    folder = _checkpoint_at_step_2("grpo")
    assert sorted(os.listdir(folder)) == ["actor", "data.pt"]  # nothing written with grpo
    assert get_prior().updates == 0

    with pytest.raises(ckpt.EBPOCheckpointError) as err:
        build_checkpoint_callback(compose(EBPO, CALLBACK, "trainer.default_local_dir=ckpt"))
    msg = str(err.value)
    assert str(workdir / "ckpt" / "global_step_2") in msg and "+algorithm.ebpo.allow_missing_state=true" in msg

    get_prior().assign(EBPOPrior(Moments(3.0, 0.5, 0.75), Moments(1.0, 0.5, 0.0), 1))
    with caplog.at_level(logging.WARNING, logger="verl_ebpo.checkpoint"):
        cb = build_checkpoint_callback(
            compose(EBPO, CALLBACK, "trainer.default_local_dir=ckpt", "+algorithm.ebpo.allow_missing_state=true")
        )
    assert cb.resumed_from.step == 2 and get_prior().state_dict() == EBPOPrior().state_dict()
    assert any("global_step_2" in r.getMessage() and "fresh" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    "damage, words",
    [
        (lambda text: text[: len(text) // 2], ["corrupt"]),
        (lambda text: text.replace('"version": 1', '"version": 2'), ["corrupt", "version 1"]),
        (lambda text: text.replace('"global_step": 2', '"global_step": 1'), ["global step 1", "step 2"]),
        (lambda text: text.replace('"m2": ', '"m2": -'), ["corrupt", "m2 >= 0"]),
    ],
    ids=["truncated", "wrong-version", "other-step", "negative-m2"],
)
def test_corrupt_or_wrong_prior_file_is_an_error_naming_the_file(workdir, damage, words):
    folder = _checkpoint_at_step_2()
    path = os.path.join(folder, "ebpo_prior.json")
    text = open(path).read()
    damaged = damage(text)
    assert damaged != text
    with open(path, "w") as f:
        f.write(damaged)
    with pytest.raises(ckpt.EBPOCheckpointError) as err:
        build_checkpoint_callback(compose(EBPO, CALLBACK, "trainer.default_local_dir=ckpt"))
    assert str(workdir / "ckpt" / "global_step_2" / "ebpo_prior.json") in str(err.value)
    for word in words:
        assert word in str(err.value)


def test_prior_saved_under_other_options_is_loaded(workdir):
    _checkpoint_at_step_2()
    saved = get_prior().state_dict()
    reset_prior()
    build_checkpoint_callback(compose(EBPO, CALLBACK, "trainer.default_local_dir=ckpt", "+algorithm.ebpo.prior_decay=0.9"))
    assert get_prior().state_dict() == saved


# -- atomic writes; verl's checkpoint rotation --------------------------------------------------------------


def test_crash_mid_write_leaves_the_previous_file(workdir, monkeypatch):
    folder = _checkpoint_at_step_2()
    before = open(os.path.join(folder, "ebpo_prior.json")).read()
    get_prior().assign(EBPOPrior(Moments(1.0, 1.0, 0.0), Moments(1.0, 1.0, 0.0), 9))

    def crash(*args, **kwargs):
        raise OSError("simulated crash before the rename")

    monkeypatch.setattr("verl_ebpo.advantage.prior.os.replace", crash)
    with pytest.raises(OSError, match="simulated"):
        ckpt.save_prior(folder, 2)
    assert sorted(os.listdir(folder)) == ["actor", "data.pt", "ebpo_prior.json"]  # no half or temp file
    assert open(os.path.join(folder, "ebpo_prior.json")).read() == before


def test_verls_checkpoint_rotation_removes_only_actor_and_leaves_the_prior(workdir):
    """FSDP/Megatron managers register `global_step_N/actor` and rmtree it when over max_actor_ckpt_to_keep."""
    from verl.utils.checkpoint.checkpoint_manager import BaseCheckpointManager

    folder = _checkpoint_at_step_2()
    rotation = SimpleNamespace(previous_saved_paths=[os.path.join(folder, "actor")])
    rotation.remove_previous_save_local_path = lambda paths: BaseCheckpointManager.remove_previous_save_local_path(
        rotation, paths
    )
    BaseCheckpointManager.register_checkpoint(rotation, "ckpt/global_step_3/actor", max_ckpt_to_keep=1)
    assert sorted(os.listdir(folder)) == ["data.pt", "ebpo_prior.json"]


@st.composite
def _valid_moments(draw):
    """Moments that satisfy the loader's invariants: group_mean.weight <= reward.weight, both 0 or both > 0,
    an empty accumulator has mean = m2 = 0, |mean| <= 1e100 and m2 <= weight * 1e200."""
    w_r = draw(st.one_of(st.just(0.0), st.floats(1e-3, 1e12)))
    if w_r == 0:
        return Moments(), Moments(), 0
    w_g = draw(st.floats(1e-3, 1.0)) * w_r
    return (Moments(w_r, draw(st.floats(-1e6, 1e6)), draw(st.floats(0, 1e12))),
            Moments(w_g, draw(st.floats(-1e6, 1e6)), draw(st.floats(0, 1e12))), draw(st.integers(1, 10**9)))


@settings(max_examples=40, deadline=None)
@given(moments=_valid_moments(), step=st.integers(0, 10**9))
def test_saved_prior_reloads_exactly(moments, step):
    reward, group_mean, updates = moments
    prior = EBPOPrior(reward, group_mean, updates)
    with tempfile.TemporaryDirectory() as d:
        path = ckpt.save_prior(d, step, prior)
        loaded, got_step = ckpt.read_prior_file(path)
    assert got_step == step and loaded.state_dict() == prior.state_dict()


# -- verl-ebpo inspect --------------------------------------------------------------------------------------------


def _inspect(capsys, *argv):
    parser = argparse.ArgumentParser()
    from verl_ebpo.tools import inspect_prior

    inspect_prior.add_arguments(parser)
    rc = inspect_prior.run(parser.parse_args(list(argv)))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_inspect_prints_the_prior_and_s_for_each_group_size(workdir, capsys):
    from verl_ebpo.tools.cli import SUBCOMMANDS

    assert SUBCOMMANDS["inspect"][0] == "verl_ebpo.tools.inspect_prior"  # its own module, beside the other commands
    # rewards: weight 8, mean 0.5, m2 2 -> sigma2 0.25; group means: weight 2, m2 0.125 -> tau2 0.0625
    prior = EBPOPrior(Moments(8.0, 0.5, 2.0), Moments(2.0, 0.5, 0.125), 1)
    folder = workdir / "ckpt" / "global_step_7"
    path = ckpt.save_prior(folder, 7, prior)
    (workdir / "ckpt" / "latest_checkpointed_iteration.txt").write_text("7")
    expected_s = {"1": 0.8, "4": 0.5, "8": 1 / 3, "16": 0.2, "32": 1 / 9}  # (0.25/G) / (0.25/G + 0.0625)
    for target in (path, folder, workdir / "ckpt"):
        rc, out, err = _inspect(capsys, str(target), "--json")
        assert rc == 0, err
        d = json.loads(out)
        assert d["path"] == str(path) and d["global_step"] == 7
        assert (d["mu_glob"], d["sigma2"], d["tau2"], d["weight"]) == (0.5, 0.25, 0.0625, 8.0)
        assert d["shrinkage"] == pytest.approx(expected_s, rel=1e-12)
    rc, out, _ = _inspect(capsys, str(folder))
    assert rc == 0
    assert "mu_glob     0.5\n" in out and "sigma2      0.25\n" in out and "tau2        0.0625\n" in out
    assert "G=4   S=0.500000" in out and "G=32  S=0.111111" in out


def test_inspect_errors_name_the_path(workdir, capsys):
    (workdir / "bare").mkdir()
    (workdir / "bad.json").write_text("{not json")
    for target, words in [("nowhere", "does not exist"), ("bare", "holds neither"), ("bad.json", "corrupt")]:
        rc, out, err = _inspect(capsys, str(workdir / target))
        assert rc == 2 and out == ""
        assert str(workdir / target) in err and words in err


# -- the fresh process of the resume test --------------------------------------------------------------------------


def _resume_main(argv):
    first, last, out_path, overrides = int(argv[0]), int(argv[1]), argv[2], argv[3:]
    os.environ.setdefault("VERL_FORCE_DEVICE", "cpu")
    assert get_prior().updates == 0  # a new process: the prior is empty until the callback restores it
    config = compose(*overrides)
    cb = build_checkpoint_callback(config)  # what verl's trainer __init__ does
    restored = get_prior().state_dict()
    advantages = run_steps(config, range(first, last + 1))
    torch.save(
        {
            "resumed_from": [cb.resumed_from.folder, cb.resumed_from.step],
            "restored_state": restored,
            "advantages": advantages,
            "final_state": get_prior().state_dict(),
        },
        out_path,
    )


if __name__ == "__main__":
    if sys.argv[1] == "resume":
        _resume_main(sys.argv[2:])
    else:
        raise SystemExit(f"unknown command {sys.argv[1]!r}")
