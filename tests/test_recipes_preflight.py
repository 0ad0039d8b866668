"""Every recipe under both protocols passes `verl-ebpo preflight` with its default variables, against
stand-in data (the files prepare_data.py and label_data.sh write) and config.json files with the real shapes of the
three models, the checkpoint volume's free space told by FREE_DISK_GB (a 10 TB cluster volume). The preflight
command is the recipe's own (`RECIPE_DRY_RUN=preflight`), run in this process. Also: the recipes refuse several
nodes without SHARED_DIR, run the preflight before launching (a refusal launches nothing), the token budgets, the
80 GB preset, Megatron's context parallelism, the authors' checkpoint contents, and DAPO's discarded answers."""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import preflight_standins as standins  # noqa: E402
from test_recipes_scripts import COMPOSED, compose, dry_command, dry_run, flatten, recipe_env, script  # noqa: E402

from verl_ebpo.tools.preflight import main as preflight_main  # noqa: E402

FREE_DISK_GB = "10000"
H200 = 143_771 * 2**20  # nvidia-smi's memory.total of an H200 (MiB): 150.8e9 bytes


@pytest.fixture(autouse=True)
def paper_cluster(monkeypatch):
    """The cluster the preflight detects: 4 nodes x 8 H200 with 2 TB of host memory each (Ray's answer faked), and a
    wandb key (the recipes' default logger has wandb)."""
    from verl_ebpo.tools.preflight import checks
    from verl_ebpo.tools.preflight.cluster import Cluster

    found = Cluster(4, 8, 32, H200, 2e12, 0, "stand-in Ray cluster: 4 GPU nodes, 32 GPUs")
    monkeypatch.setattr(checks, "detect_cluster", lambda ray_address=None: found)
    monkeypatch.setenv("WANDB_API_KEY", "stand-in")
    return found


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A shared folder with both protocols' data folders, and the three models' config.json."""
    root = tmp_path_factory.mktemp("cluster")
    shared = root / "shared"
    standins.data_dir(shared / "data" / "verl_ebpo")
    standins.data_dir(shared / "data" / "verl_ebpo_authors")
    models = {m: standins.model_dir(root, m) for m in standins.SHAPES}
    return shared, models


def _env(cluster, model, **extra):
    shared, models = cluster
    return {"SHARED_DIR": str(shared), "POSTTRAINED_MODEL_PATH": str(models[model]),
            "BASE_MODEL_PATH": str(models[model]), "FREE_DISK_GB": FREE_DISK_GB, **extra}


def preflight_argv(model, algo, env, args=(), make_metrics_folder=True):
    """The recipe's preflight command after `python -m verl_ebpo.tools.preflight` (RECIPE_DRY_RUN=preflight);
    the metrics folder made as the recipe makes it before running it."""
    out = subprocess.run(["bash", str(script(model, algo)), *args], env=recipe_env({**env, "RECIPE_DRY_RUN": "preflight"}),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    argv = out.stdout.splitlines()
    argv = argv[argv.index("verl_ebpo.tools.preflight") + 1:]
    metrics = next(a.split("=", 1)[1] for a in argv if "VERL_FILE_LOGGER_PATH=" in a)
    if make_metrics_folder:
        os.makedirs(os.path.dirname(metrics), exist_ok=True)
    return argv


def run_preflight(argv, verbose=True):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = preflight_main(["--verbose", *argv] if verbose else argv)
    return rc, out.getvalue(), err.getvalue()


_table_rows = standins.table_rows


@pytest.mark.slow  # 30 preflights of ~1.5 s each: CI runs it after the README command
@pytest.mark.parametrize("protocol", ["paper", "authors"])
def test_every_recipe_passes_preflight_with_its_defaults(cluster, protocol):
    tables = {}
    for p, model, algo in COMPOSED:
        if p != protocol:
            continue
        argv = preflight_argv(model, algo, _env(cluster, model, PROTOCOL=protocol))
        assert argv[:6] == ["--working-dir", str(Path(script(model, algo)).parents[2]), "--gpu-memory-gb", "141",
                            "--ray-address", "http://127.0.0.1:8265"]
        rc, out, err = run_preflight(argv)
        assert rc == 0, (model, algo, err)
        tables[(model, algo)] = out
    assert len(tables) == (27 if protocol == "paper" else 20)
    rows = {k: _table_rows(t) for k, t in tables.items()}
    for (model, algo), r in rows.items():
        assert "ok" in r["several nodes"] and "ok" in r["reward"] and "scores 1" in r["reward"], (model, algo)
        assert "entropy (chunked)" in r["memory: old log-prob"], (model, algo)
        for check in ("memory: rollout", "memory: old log-prob", "memory: ref log-prob", "memory: update"):
            assert " ok " in r[check], (model, algo, r[check])
    # the checkpoint plans each protocol states (recipes/README.md): paper 1000 steps, a save every 100, 2 kept
    if protocol == "paper":
        assert "1,000 steps, 10 saves (every 100), 2 kept" in rows[("qwen3_8b", "ebpo")]["checkpoints"]
        assert "2 x 98.3 GB = 196.6 GB" in rows[("qwen3_8b", "ebpo")]["checkpoints"]
        assert "2 x 177.2 GB = 354.4 GB" in rows[("qwen3_14b", "ebpo_topic")]["checkpoints"]
    else:  # authors' EBPO: 20 epochs x 33 steps, every 10 -> 66 checkpoints of weights only (4 B a parameter)
        assert "660 steps, 66 saves (every 10), 66 kept" in rows[("qwen3_8b", "ebpo")]["checkpoints"]
        assert "66 x 32.8 GB = 2.16 TB" in rows[("qwen3_8b", "ebpo")]["checkpoints"]
        # topic order pads 17,398 rows to 34 batches: 680 steps, 68 checkpoints
        assert "680 steps, 68 saves" in rows[("qwen3_14b", "ebpo_topic")]["checkpoints"]
        assert "68 x 59.1 GB = 4.02 TB" in rows[("qwen3_14b", "ebpo_topic")]["checkpoints"]
        assert "198 steps, 4 saves (every 50), 2 kept" in rows[("qwen3_8b", "grpo")]["checkpoints"]  # 6 epochs


def test_the_authors_keep_all_plan_with_optimizer_states_is_refused(cluster):
    env = _env(cluster, "qwen3_14b", PROTOCOL="authors", CKPT_CONTENTS="[model,optimizer,extra]")
    rc, _, err = run_preflight(preflight_argv("qwen3_14b", "ebpo", env))
    assert rc == 2 and "66 x 177.2 GB = 11.70 TB" in err and "does not fit" in err and err.count("\n") == 1


def test_several_nodes_need_a_shared_folder(cluster, tmp_path):
    shared, models = cluster
    env = {"POSTTRAINED_MODEL_PATH": str(models["qwen3_8b"]), "HOME": str(tmp_path), "LAUNCH": "local",
           "PYTHON": "/bin/false", "RECIPE_PYTHON": sys.executable}
    out = subprocess.run(["bash", str(script("qwen3_8b", "ebpo"))], env=recipe_env(env), capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "NNODES=4: set SHARED_DIR to the folder every node mounts" in out.stderr and "or NNODES=1" in out.stderr
    # the preflight also refuses $HOME paths when SHARED_DIR is declared but the folders are elsewhere
    argv = preflight_argv("qwen3_8b", "ebpo", _env(cluster, "qwen3_8b", CKPTS_ROOT=str(tmp_path / "ckpts")))
    rc, _, err = run_preflight(argv)
    assert rc == 2 and "trainer.default_local_dir" in err and "is not under the shared folder" in err


def test_the_recipe_runs_the_preflight_before_launching(cluster, tmp_path):
    """A preflight refusal (here: 100 GB free for 10 checkpoints of 98 GB) is the one line and launches nothing;
    SKIP_PREFLIGHT=1 launches."""
    marker = tmp_path / "launched"
    fake = tmp_path / "python3"
    fake.write_text(f"#!/bin/sh\ntouch {marker}\n")
    fake.chmod(0o755)
    env = recipe_env({**_env(cluster, "qwen3_8b", FREE_DISK_GB="100"), "LAUNCH": "local", "PYTHON": str(fake),
                      "RECIPE_PYTHON": sys.executable, "CKPTS_ROOT": str(cluster[0] / "ckpts-launch")})
    out = subprocess.run(["bash", str(script("qwen3_8b", "ebpo"))], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith("verl-ebpo preflight: checkpoints:")
    assert "free 100.0 GB" in out.stderr and not marker.exists()
    out = subprocess.run(["bash", str(script("qwen3_8b", "ebpo"))], env={**env, "SKIP_PREFLIGHT": "1"},
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and marker.exists(), out.stderr


def test_token_budgets_entropy_chunking_the_80_gb_preset_and_megatron_context_parallelism():
    def flat(env, model="qwen3_14b", algo="ebpo"):
        return flatten(compose(dry_run(model, algo, env)))

    seq = 4096 + 8192
    f = flat({})  # Qwen3-14B: SP_SIZE=2
    assert f["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"] == seq * 2 // 2
    assert f["actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu"] == seq * 4 // 2
    assert f["actor_rollout_ref.ref.log_prob_max_token_len_per_gpu"] == seq * 4 // 2
    assert f["actor_rollout_ref.actor.entropy_from_logits_with_chunking"] is True
    assert f["actor_rollout_ref.actor.checkpoint.save_contents"] == ["model", "optimizer", "extra"]
    f = flat({"GPU_MEMORY_GB": "80"})  # the 80 GB preset halves the budgets
    assert f["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"] == seq // 2
    assert f["actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu"] == seq * 2 // 2
    # Megatron: the budgets follow context parallelism, not Ulysses' SP_SIZE (which it ignores)
    f = flat({"BACKEND": "megatron"})
    assert f["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"] == seq * 2
    f = flat({"BACKEND": "megatron", "MEGATRON_CP": "2"})
    assert f["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"] == seq
    assert f["actor_rollout_ref.actor.megatron.context_parallel_size"] == 2
    assert f["actor_rollout_ref.ref.megatron.context_parallel_size"] == 2
    # the authors' EBPO schedule keeps weights only
    f = flat({"PROTOCOL": "authors"}, "qwen3_8b", "ebpo")
    assert f["actor_rollout_ref.actor.checkpoint.save_contents"] == ["model", "extra"]


def test_paper_dapo_logs_its_discarded_answers_with_the_replay_buffer():
    f = flatten(compose(dry_run("qwen3_8b", "dapo")))
    assert f["trainer.v1.sampler.custom_sampler.name"] == "TrackedReplayBuffer"
    assert "trainer.v1.sampler.sampler_kwargs.one_pass" not in f  # every epoch, not one pass
    assert f["algorithm.filter_groups.enable"] is True  # the buffer reads DAPO's filter from the trainer's config
    f = flatten(compose(dry_run("qwen3_8b", "dapo_diff")))
    assert f["trainer.v1.sampler.sampler_kwargs.one_pass"] is True  # the -diff run keeps its one pass
    # nothing dropped, nothing to log: no buffer for GRPO, EBPO or the authors' DAPO (no dynamic sampling)
    for algo, env in (("grpo", {}), ("ebpo", {}), ("dapo", {"PROTOCOL": "authors"})):
        assert "TrackedReplayBuffer" not in " ".join(dry_command("qwen3_8b", algo, env)), algo


# ---- one node of 8 x 80 GB, the recipes unchanged -----------------------------------------------------------------

H100 = 81_559 * 2**20  # nvidia-smi's memory.total of an H100 80GB (MiB): 85.5e9 bytes


@pytest.fixture()
def one_node_80gb(tmp_path, monkeypatch):
    """This machine: 8 x 80 GB GPUs (a stand-in nvidia-smi on PATH for the recipe's detection, the same figures for the
    preflight's), 2 TB of host memory; nothing declared (NNODES, N_GPUS_PER_NODE, GPU_MEMORY_GB unset)."""
    from verl_ebpo.tools.preflight import checks
    from verl_ebpo.tools.preflight.cluster import Cluster

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\n" + "echo 81559\n" * 8)
    (bin_dir / "nvidia-smi").chmod(0o755)
    found = Cluster(None, 8, None, H100, 2e12, 8, "this machine: 8 GPU(s) (nvidia-smi)")
    monkeypatch.setattr(checks, "detect_cluster", lambda ray_address=None: found)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "NNODES": None, "N_GPUS_PER_NODE": None, "GPU_MEMORY_GB": None,
            "CUDA_VISIBLE_DEVICES": None}


@pytest.mark.slow  # ~30 preflights; one node of 80 GB by default: test_qwen3_14b_on_one_80_gb_node_...
def test_one_node_of_80_gb_fits_every_recipe_unchanged(cluster, one_node_80gb):
    """Every paper recipe and the authors' EBPO runs, nothing set but the data and the disk: the recipe detects one node
    of 8 GPUs of 85 GB (the 80 GB preset: halved token budgets, the model's GPU_MEM_UTIL_80GB) and the plan fits."""
    cases = [c for c in COMPOSED if c[0] == "paper" or c[2] == "ebpo"]
    for protocol, model, algo in cases:
        argv = preflight_argv(model, algo, {**_env(cluster, model, PROTOCOL=protocol), **one_node_80gb})
        assert "--gpu-memory-gb" not in argv  # nothing declared: the preflight uses what it detects
        flat = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in argv if "=" in a}
        assert (flat["trainer.nnodes"], flat["trainer.n_gpus_per_node"]) == ("1", "8")
        assert flat["actor_rollout_ref.rollout.gpu_memory_utilization"] == ("0.6" if model == "qwen3_14b" else "0.7")
        rc, out, err = run_preflight(argv)
        assert rc == 0, (protocol, model, algo, err)
        rows = _table_rows(out)
        assert re.search(r"cluster\s+ok\s+1 x 8 = 8 GPUs of 8", rows["cluster"])
        assert "85.5 GB (detected)" in rows["memory: update"], rows["memory: update"]
        for check in ("memory: rollout", "memory: old log-prob", "memory: ref log-prob", "memory: update", "host memory"):
            assert " ok " in rows[check], (model, algo, rows[check])


def test_qwen3_14b_on_one_80_gb_node_is_refused_at_0_7_and_passes_at_the_preset(cluster, one_node_80gb):
    env = {**_env(cluster, "qwen3_14b"), **one_node_80gb}
    rc, out, err = run_preflight(preflight_argv("qwen3_14b", "ebpo", {**env, "GPU_MEM_UTIL": "0.7"}))
    # 12 B x 14.77 B / 8 = 22.2 GB resident; (1 - 0.7) x 85.5 GB - 22.2 GB = 3.5 GB < the 4 GB margin
    assert rc == 2 and err.count("\n") == 1, err
    assert "memory: rollout:" in err and "22.2 GB of learner state" in err and "vLLM would refuse to start" in err
    assert "(recipes: GPU_MEM_UTIL=0.65)" in err
    rc, out, err = run_preflight(preflight_argv("qwen3_14b", "ebpo", env))  # the preset: 0.6
    assert rc == 0, err
    assert re.search(r"memory: rollout\s+ok\s+vLLM at 0.6: .* vLLM starts when gpu_memory_utilization 0.6 x 85.5 GB",
                     _table_rows(out)["memory: rollout"])


def test_a_declared_cluster_larger_than_the_detected_one_is_refused_naming_the_variable(cluster, one_node_80gb,
                                                                                        monkeypatch):
    from verl_ebpo.tools.preflight import checks
    from verl_ebpo.tools.preflight.cluster import Cluster

    ray = Cluster(1, 8, 8, H100, 2e12, 8, "Ray cluster at http://127.0.0.1:8265: 1 GPU node(s), 8 GPUs")
    monkeypatch.setattr(checks, "detect_cluster", lambda ray_address=None: ray)
    env = {**_env(cluster, "qwen3_8b"), **one_node_80gb, "NNODES": "4"}
    rc, _, err = run_preflight(preflight_argv("qwen3_8b", "ebpo", env))
    assert rc == 2 and err.count("\n") == 1 and "(recipes: NNODES=1)" in err and "the cluster has 8" in err, err


def test_the_default_output_is_read_in_20_seconds(cluster, one_node_80gb):
    """One node of 8 x 80 GB, the recipe unchanged (issue 50): one line a check within 100 characters, a closing
    line, and the row users ask first: the time a step and the run's GPU-hours, said to be an estimate. A FAIL:
    one line on stderr naming its fix."""
    argv = preflight_argv("qwen3_8b", "ebpo", {**_env(cluster, "qwen3_8b"), **one_node_80gb})
    rc, out, err = run_preflight(argv, verbose=False)
    assert rc == 0 and err == "", err
    lines = out.splitlines()
    assert all(len(line) <= 100 for line in lines), max(lines, key=len)
    assert not any(line.endswith("...") for line in lines)  # nothing cut: each headline fits
    assert [line for line in lines if line.startswith("verl-ebpo preflight:")] == lines[-1:]
    time_row = _table_rows(out)["time (estimate)"]
    # Qwen3-8B, 512 prompts x 4 answers of 4,096 (+ 2,048 prompt) tokens on 8 GPUs (estimates.step_seconds):
    # rollout 512 x 4 x 4,096 / (3,000 x 8) = 349.5 s, learner 512 x 4 x 6,144 x 12 x 8.19e9 / (4.5e14 x 8) = 343.4 s
    # + 21 validations (before step 1, every 50) of 30 stand-in prompts x 16 answers of 4,096 tokens: 81.9 s each
    step = 512 * 4 * 4096 / (3000 * 8) + 512 * 4 * 6144 * 12 * 8_190_735_360 / (4.5e14 * 8)
    run = step * 1000 + 21 * 30 * 16 * 4096 / (3000 * 8)
    assert f"est   ~{step / 60:.1f} min a step x 1,000 = ~{run / 86400:.1f} days, {run * 8 / 3600:,.0f} GPU-hours" \
        in time_row, time_row
    rc, out, err = run_preflight(argv + ["--free-disk-gb", "100"], verbose=False)
    assert rc == 2 and err.count("\n") == 1 and "does not fit; lower trainer.max_actor_ckpt_to_keep" in err, err
    assert all(len(line) <= 100 for line in out.splitlines())


def test_the_recipes_preflight_command_with_a_metrics_folder_the_run_makes(cluster, one_node_80gb):
    """RECIPE_DRY_RUN=preflight prints the command before the run makes the metrics folder: named with --creates
    (the launcher makes it), its absence is not a FAIL; a folder nobody makes still is."""
    argv = preflight_argv("qwen3_8b", "ebpo", {**_env(cluster, "qwen3_8b", CKPTS_ROOT=str(cluster[0] / "fresh")),
                                               **one_node_80gb}, make_metrics_folder=False)
    metrics = next(a.split("=", 1)[1] for a in argv if "VERL_FILE_LOGGER_PATH=" in a)
    assert not os.path.exists(os.path.dirname(metrics))
    i = argv.index("--creates")  # recipes/common.sh names the folder its launcher makes
    assert argv[i + 1] == os.path.dirname(metrics)
    rc, out, err = run_preflight(argv[:i] + argv[i + 2:])  # without it: the folder nobody makes is a FAIL
    assert rc == 2 and "metrics file: its folder does not exist" in err and "mkdir -p" in err, err
    rc, out, err = run_preflight(argv)
    assert rc == 0 and "made by the launcher" in _table_rows(out)["metrics file"], err
