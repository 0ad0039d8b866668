"""`verl-ebpo preflight`: the estimates against hand-computed numbers, the README's GPU command passing it
on stand-in data and a stand-in Qwen3-8B config.json, and each blocking problem refused with one line (exit 2).
Preflight runs in this process (one verl import for all); its config is composed by Hydra's compose API as
main_ppo composes it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import preflight_standins as standins  # noqa: E402
from verl_ebpo.tools.preflight import estimates as est  # noqa: E402
from verl_ebpo.tools.preflight import main as preflight_main  # noqa: E402

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


@pytest.fixture(autouse=True)
def not_detected(monkeypatch):
    """No GPU and no Ray cluster detected (whatever machine runs the tests): the declared figures are used."""
    from verl_ebpo.tools.preflight import checks

    try:
        from verl_ebpo.tools.preflight.cluster import Cluster
    except ImportError:  # a package without cluster detection: nothing is detected
        return None
    found = Cluster(host_bytes=2e12, source="stand-in: not detected")
    monkeypatch.setattr(checks, "detect_cluster", lambda ray_address=None: found)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return found


# ---- the estimates, by hand ------------------------------------------------------------------------------------


def test_parameter_counts_of_the_three_models():
    # Qwen3-8B per layer: q,o 2*4096*4096 + k,v 2*4096*1024 = 41,943,040; MLP 3*4096*12288 = 150,994,944;
    # norms 2*4096 + q/k norms 2*128 = 8,448 -> 192,946,432 x 36 = 6,946,071,552; embeddings 2*151936*4096 =
    # 1,244,659,712; final norm 4,096 -> 8,190,735,360 (Qwen's card: 8.2 B)
    assert est.param_count(standins.SHAPES["qwen3_8b"]) == 8_190_735_360
    # Qwen3-14B: (2*5120*5120 + 2*5120*1024 + 3*5120*17408 + 2*5120 + 256) x 40 + 2*151936*5120 + 5120
    assert est.param_count(standins.SHAPES["qwen3_14b"]) == 40 * (52_428_800 + 10_485_760 + 267_386_880 + 10_496) \
        + 1_555_824_640 + 5120 == 14_768_307_200
    # Llama-3.1-8B: no q/k norms; (2*4096^2 + 2*4096*1024 + 3*4096*14336 + 2*4096) x 32 + 2*128256*4096 + 4096
    assert est.param_count(standins.SHAPES["llama3_8b"]) == 8_030_261_248
    with pytest.raises(est.EstimateError, match="hidden_size"):
        est.param_count({**standins.SHAPES["qwen3_8b"], "hidden_size": 0})


def test_checkpoint_bytes_and_plan():
    p = 8_190_735_360
    # FSDP, fp32 parameters (4 B) + AdamW's two fp32 moments (8 B): 98.3 GB; weights only 32.8 GB
    assert sum(est.checkpoint_bytes(p, "fsdp", ["model", "optimizer", "extra"]).values()) == 12 * p
    assert sum(est.checkpoint_bytes(p, "fsdp", ["model", "extra"]).values()) == 4 * p
    assert sum(est.checkpoint_bytes(p, "megatron", ["model", "optimizer", "hf_model"]).values()) == (2 + 12 + 2) * p
    # the authors' EBPO plan: 17,398 rows // 512 = 33 steps an epoch, 20 epochs = 660 steps, every 10: 66 kept
    assert est.checkpoint_plan(17_398, 512, 20, None, 10, None) == est.CheckpointPlan(33, 660, 66, 66, 66)
    # total_training_steps replaces epochs x steps; a save at the last step too (1000 // 300 = 3, + 1); keep 2
    assert est.checkpoint_plan(17_398, 512, 100, 1000, 300, 2) == est.CheckpointPlan(33, 1000, 4, 2, 2)
    assert est.checkpoint_plan(17_398, 512, 1, None, -1, None).saves == 0


def test_memory_per_pass():
    # 49,152 tokens x 151,936 (vocabulary) x 2 B
    assert est.logits_bytes(49_152, 151_936) == 14_935_916_544
    assert est.logits_bytes(49_152, 151_936, tp=2) == 49_152 * 75_968 * 2
    assert est.entropy_bytes(49_152, 151_936) == 2 * 14_935_916_544  # softmax + product, unchunked
    assert est.entropy_bytes(49_152, 151_936, chunked=True) == 3 * 2048 * 151_936 * 4
    s = est.learner_shards(8_000_000_000, "fsdp", 32)
    assert (s.params, s.grads, s.optimizer) == (1_000_000_000, 1_000_000_000, 2_000_000_000)  # 16 B / 32
    s = est.learner_shards(8_000_000_000, "megatron", 32, tp=2, pp=2)  # dp = 8
    assert (s.params, s.grads, s.optimizer) == (4_000_000_000, 8_000_000_000, 3_000_000_000)
    assert est.learner_shards(8_000_000_000, "fsdp", 32, param_offload=True, optimizer_offload=True).params == 0


# ---- the README's GPU command ----------------------------------------------------------------------------------


def _readme_args(tmp_path: Path, shared: Path) -> list[str]:
    """The README's GPU block run by bash as pasted, with `verl-ebpo`, `python3` and `mkdir` recording their
    arguments (nothing launched); SHARED points /shared at a test folder."""
    block = re.search(r"## One complete GPU run.*?```bash\n(.*?)```", README, re.S).group(1)
    stub = ('verl-ebpo() { printf "%s\\n" "$@" > "$PRE_OUT"; }\npython3() { printf "%s\\n" "$@" > "$ARGV_OUT"; }\n'
            'mkdir() { command mkdir "$@"; }\n')
    env = {"PATH": os.environ["PATH"], "HOME": "/home/researcher", "SHARED": str(shared),
           "PRE_OUT": str(tmp_path / "pre"), "ARGV_OUT": str(tmp_path / "argv")}
    out = subprocess.run(["bash", "-euc", stub + block], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    pre = (tmp_path / "pre").read_text().splitlines()
    argv = (tmp_path / "argv").read_text().splitlines()
    assert pre[0] == "preflight" and argv[:2] == ["-m", "verl.trainer.main_ppo"]
    assert pre[pre.index(argv[2]):] == argv[2:]  # preflight checks exactly the overrides the trainer gets
    return pre[1:]


@pytest.fixture()
def readme_run(tmp_path, monkeypatch):
    """The documented data (prepare_data.py + label_data.sh topics: dapo_math_17k.parquet with extra_info.topic,
    math500.parquet) as stand-ins under a shared folder, and Qwen/Qwen3-8B's config.json in the HF cache."""
    shared = tmp_path / "shared"
    standins.data_dir(shared / "data" / "verl_ebpo")
    cache = tmp_path / "hf"
    snap = cache / "models--Qwen--Qwen3-8B" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (cache / "models--Qwen--Qwen3-8B" / "refs").mkdir()
    (cache / "models--Qwen--Qwen3-8B" / "refs" / "main").write_text("abc")
    (snap / "config.json").write_text((standins.model_dir(tmp_path, "qwen3_8b") / "config.json").read_text())
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    return shared, _readme_args(tmp_path, shared)


def _run(capsys, argv, verbose=True):
    rc = preflight_main(["--verbose", *argv] if verbose else argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


_rows = standins.table_rows


def test_the_readme_run_passes_preflight(readme_run, capsys):
    shared, args = readme_run
    rc, out, err = _run(capsys, ["--free-disk-gb", "1000", *args])
    assert rc == 0, err
    rows = _rows(out)
    assert "17,408 served in topic order: 34 steps an epoch of 512" in rows["data: train"]
    assert "8.19 B parameters" in rows["model"]
    # 1000 steps, a save every 100, the last 2 kept: 2 x 98.3 GB (the disk the README states)
    assert "1,000 steps, 10 saves (every 100), 2 kept" in rows["checkpoints"] and "= 196.6 GB" in rows["checkpoints"]
    assert "scores 1" in rows["reward"] and "4 nodes" in rows["several nodes"]
    assert "ok" in rows["memory: old log-prob"] and "entropy (chunked)" in rows["memory: old log-prob"]


def _one_line_refusal(rc, err, *needles):
    assert rc == 2
    assert err.count("\n") == 1 and err.startswith("verl-ebpo preflight: "), err
    for needle in needles:
        assert needle in err, err


def test_a_missing_training_file_is_refused(readme_run, capsys):
    shared, args = readme_run
    (shared / "data" / "verl_ebpo" / "dapo_math_17k.parquet").unlink()
    rc, _, err = _run(capsys, ["--free-disk-gb", "1000", *args])
    _one_line_refusal(rc, err, "data.train_files", "dapo_math_17k.parquet")


def test_a_missing_column_is_refused(readme_run, capsys):
    shared, args = readme_run
    standins.write(shared / "data" / "verl_ebpo" / "math500.parquet", 30, drop="data_source")
    rc, _, err = _run(capsys, ["--free-disk-gb", "1000", *args])
    _one_line_refusal(rc, err, "math500.parquet", "no column 'data_source'")


def test_unlabelled_rows_are_refused(readme_run, capsys):
    shared, args = readme_run
    standins.write(shared / "data" / "verl_ebpo" / "dapo_math_17k.parquet", 1024, drop="extra_info")
    rc, _, err = _run(capsys, ["--free-disk-gb", "1000", *args])
    _one_line_refusal(rc, err, "no column 'extra_info'")


def test_a_pass_whose_logits_exceed_the_gpu_is_refused(readme_run, capsys):
    # without chunking, the old-log-prob pass (4 x 12,288 tokens): logits 49,152 x 151,936 x 2 B = 14.9 GB, softmax and
    # product 29.9 GB, one layer's forward 5.6 GB, the all-gathered lm_head 1.2 GB, the resident states 12 B x 8.19 B / 32
    # = 3.1 GB, the runtime 4 GB: 58.8 GB > 40 GB
    _, args = readme_run
    args = [a for a in args if "entropy_from_logits_with_chunking" not in a]
    args[args.index("--gpu-memory-gb") + 1] = "40"
    rc, out, err = _run(capsys, ["--free-disk-gb", "1000", *args])
    _one_line_refusal(rc, err, "memory: old log-prob: 58.8 GB of 40.0 GB",
                      "lower actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
                      "entropy_from_logits_with_chunking=True")
    assert "not chunked) 29.9 GB" in out and "= 58.8 GB of 40 GB (declared: --gpu-memory-gb)" in out


def test_the_real_free_space_is_used_without_the_option(readme_run, capsys, monkeypatch):
    import shutil
    from collections import namedtuple

    _, args = readme_run
    seen = []
    usage = namedtuple("usage", "total used free")

    def fake(path):
        seen.append(path)
        return usage(10**12, 0, 10**11)  # 100 GB free: 2 x 98.3 GB does not fit

    monkeypatch.setattr(shutil, "disk_usage", fake)
    rc, out, err = _run(capsys, args)
    _one_line_refusal(rc, err, "checkpoints:", "196.6 GB", "free 100.0 GB")
    assert "(free space now)" in _rows(out)["checkpoints"]
    assert seen and seen[0].endswith("ckpts/qwen3_8b-ebpo-topic")  # the existing checkpoint folder


def test_the_authors_keep_all_plan_at_14b_does_not_fit_a_10_tb_volume(readme_run, capsys, tmp_path):
    shared, args = readme_run
    model = standins.model_dir(tmp_path, "qwen3_14b")
    args = [a for a in args if not a.startswith(("trainer.total_training_steps", "trainer.max_actor_ckpt_to_keep",
                                                 "trainer.save_freq", "actor_rollout_ref.model.path"))]
    args += ["trainer.total_epochs=20", "trainer.save_freq=10", f"actor_rollout_ref.model.path={model}"]
    rc, _, err = _run(capsys, ["--free-disk-gb", "10000", *args])
    # TopicOrderedDataset pads 17,398 rows to 34 whole batches (17,408): 34 x 20 = 680 steps, 68 checkpoints x
    # 14.77 B x 12 B = 177.2 GB each: 12.05 TB
    _one_line_refusal(rc, err, "checkpoints: 680 steps:", "68 x 177.2 GB = 12.05 TB", "does not fit")


def test_several_nodes_with_home_paths_are_refused(readme_run, capsys, monkeypatch):
    shared, args = readme_run
    home = shared.parent / "home"
    (home / "data" / "verl_ebpo").mkdir(parents=True)
    for f in ("dapo_math_17k.parquet", "math500.parquet"):
        os.link(shared / "data" / "verl_ebpo" / f, home / "data" / "verl_ebpo" / f)
    monkeypatch.setenv("HOME", str(home))
    args = [a.replace(str(shared / "data"), str(home / "data")) for a in args]
    rc, out, err = _run(capsys, ["--free-disk-gb", "1000", *args])
    _one_line_refusal(rc, err, "trainer.nnodes=4", "data.train_files", "not under the shared folder")
    assert "($HOME of this machine)" in _rows(out)["several nodes"]
    # and without a declared shared folder at all
    args = [a for a in args if a != "--shared-dir" and a != str(shared)]
    monkeypatch.delenv("SHARED_DIR", raising=False)
    rc, _, err = _run(capsys, ["--free-disk-gb", "1000", *args])
    _one_line_refusal(rc, err, "trainer.nnodes=4", "--shared-dir or SHARED_DIR")


def test_a_missing_metrics_folder_and_a_reward_that_fails_its_own_ground_truth_are_refused(readme_run, capsys, tmp_path):
    _, args = readme_run
    moved = [a.replace("metrics-", "nowhere/metrics-") if "VERL_FILE_LOGGER_PATH" in a else a for a in args]
    rc, _, err = _run(capsys, ["--free-disk-gb", "1000", *moved])
    _one_line_refusal(rc, err, "metrics file", "does not exist")
    scorer = tmp_path / "bad_reward.py"
    scorer.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.0\n")
    bad = [f"reward.custom_reward_function.path={scorer}" if a.startswith("reward.custom_reward_function.path")
           else a for a in args]
    rc, _, err = _run(capsys, ["--free-disk-gb", "1000", *bad])
    _one_line_refusal(rc, err, "reward:", "as 0, not 1")


def test_backend_caveats_are_warnings_and_bad_options_one_line(readme_run, capsys):
    _, args = readme_run
    args = [a.replace("rollout.name=vllm", "rollout.name=sglang") for a in args]
    rc, out, err = _run(capsys, ["--free-disk-gb", "1000", *args])
    assert rc == 0, err
    assert re.search(r"backend\s+warn\s+SGLang: the rollout is not seeded", out)
    rc = subprocess.run([sys.executable, "-m", "verl_ebpo.tools.cli", "preflight", "--gpu-memory-gb", "0"],
                        capture_output=True, text=True, timeout=600)
    assert rc.returncode == 2 and "--gpu-memory-gb must be in (0, 4096]" in rc.stderr


def test_checkpoint_plan_properties():
    from hypothesis import given, strategies as st

    @given(st.integers(0, 10**6), st.integers(1, 4096), st.integers(1, 200), st.one_of(st.none(), st.integers(0, 10**5)),
           st.integers(-1, 500), st.one_of(st.none(), st.integers(-1, 100)))
    def check(rows, batch, epochs, steps, freq, keep):
        plan = est.checkpoint_plan(rows, batch, epochs, steps, freq, keep)
        total = rows // batch * epochs if steps is None else steps
        assert plan.total_steps == total
        # verl saves at every multiple of save_freq and at the last step: ceil(total / save_freq)
        assert plan.saves == (-(-total // freq) if freq > 0 else 0)
        assert plan.kept == (plan.saves if keep is None or keep <= 0 else min(plan.saves, keep))

    check()
