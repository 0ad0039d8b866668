"""Every recipe under both protocols passes `verl-ebpo preflight` with its default variables (issue 28), against
stand-in data (the files prepare_data.py and label_data.sh write) and config.json files with the real shapes of the
three models, the checkpoint volume's free space told by FREE_DISK_GB (a 10 TB cluster volume). The preflight
command is the recipe's own (`RECIPE_DRY_RUN=preflight`), run in this process. Also: the recipes refuse several
nodes without SHARED_DIR, run the preflight before launching (a refusal launches nothing), the token budgets, the
80 GB preset, Megatron's context parallelism, the authors' checkpoint contents, and DAPO's discarded answers."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import preflight_standins as standins  # noqa: E402
from test_recipes_scripts import COMPOSED, compose, dry_command, dry_run, flatten, recipe_env, script  # noqa: E402

from verl_ebpo.tools.preflight import main as preflight_main  # noqa: E402

FREE_DISK_GB = "10000"


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


def preflight_argv(model, algo, env, args=()):
    """The recipe's preflight command after `python -m verl_ebpo.tools.preflight` (RECIPE_DRY_RUN=preflight);
    the metrics folder made as the recipe makes it before running it."""
    out = subprocess.run(["bash", str(script(model, algo)), *args], env=recipe_env({**env, "RECIPE_DRY_RUN": "preflight"}),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    argv = out.stdout.splitlines()
    argv = argv[argv.index("verl_ebpo.tools.preflight") + 1:]
    metrics = next(a.split("=", 1)[1] for a in argv if "VERL_FILE_LOGGER_PATH=" in a)
    os.makedirs(os.path.dirname(metrics), exist_ok=True)
    return argv


def run_preflight(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = preflight_main(argv)
    return rc, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("protocol", ["paper", "authors"])
def test_every_recipe_passes_preflight_with_its_defaults(cluster, protocol):
    tables = {}
    for p, model, algo in COMPOSED:
        if p != protocol:
            continue
        argv = preflight_argv(model, algo, _env(cluster, model, PROTOCOL=protocol))
        assert argv[:4] == ["--gpu-memory-gb", "141", "--working-dir", str(Path(script(model, algo)).parents[2])]
        rc, out, err = run_preflight(argv)
        assert rc == 0, (model, algo, err)
        tables[(model, algo)] = out
    assert len(tables) == (27 if protocol == "paper" else 20)
    rows = {k: {line.split("  ")[0].strip(): line for line in t.splitlines()[1:]} for k, t in tables.items()}
    for (model, algo), r in rows.items():
        assert "ok" in r["several nodes"] and "ok" in r["reward"] and "scores 1" in r["reward"], (model, algo)
        assert "entropy (chunked)" in r["memory: old log-prob"], (model, algo)
        for check in ("memory: rollout", "memory: old log-prob", "memory: ref log-prob", "memory: update"):
            assert " ok " in r[check], (model, algo, r[check])
    # the checkpoint plans each protocol states (recipes/README.md): paper 1000 steps, a save every 100
    if protocol == "paper":
        assert "1,000 steps, 10 saves (every 100), 10 kept" in rows[("qwen3_8b", "ebpo")]["checkpoints"]
        assert "10 x 98.3 GB = 982.9 GB" in rows[("qwen3_8b", "ebpo")]["checkpoints"]
        assert "10 x 177.2 GB = 1.77 TB" in rows[("qwen3_14b", "ebpo_topic")]["checkpoints"]
    else:  # authors' EBPO: 20 epochs x 33 steps, every 10 -> 66 checkpoints of weights only (4 B a parameter)
        assert "660 steps, 66 saves (every 10), 66 kept" in rows[("qwen3_8b", "ebpo")]["checkpoints"]
        assert "66 x 32.8 GB = 2.16 TB" in rows[("qwen3_8b", "ebpo")]["checkpoints"]
        assert "66 x 59.1 GB = 3.90 TB" in rows[("qwen3_14b", "ebpo_topic")]["checkpoints"]
        assert "warn" in rows[("qwen3_8b", "ebpo")]["checkpoints: resume"]
        assert "198 steps, 4 saves (every 50), 4 kept" in rows[("qwen3_8b", "grpo")]["checkpoints"]  # 6 epochs


def test_the_authors_keep_all_plan_with_optimizer_states_is_refused(cluster):
    env = _env(cluster, "qwen3_14b", PROTOCOL="authors", CKPT_CONTENTS="[model,optimizer,extra]")
    rc, _, err = run_preflight(preflight_argv("qwen3_14b", "ebpo", env))
    assert rc == 2 and "66 x 177.2 GB = 11.70 TB" in err and "does not fit" in err and err.count("\n") == 1


def test_several_nodes_need_a_shared_folder(cluster, tmp_path):
    shared, models = cluster
    env = {"POSTTRAINED_MODEL_PATH": str(models["qwen3_8b"]), "HOME": str(tmp_path), "LAUNCH": "local",
           "PYTHON": "/bin/false", "RECIPE_PYTHON": sys.executable}
    out = subprocess.run(["bash", str(script("qwen3_8b", "ebpo"))], env=recipe_env(env), capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "NNODES=4: set SHARED_DIR to the folder every node mounts" in out.stderr
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
    assert f["trainer.v1.sampler.sampler_kwargs.verl.filter_groups.enable"] is True  # linked to DAPO's filter
    f = flatten(compose(dry_run("qwen3_8b", "dapo_diff")))
    assert f["trainer.v1.sampler.sampler_kwargs.one_pass"] is True  # the -diff run keeps its one pass
    # nothing dropped, nothing to log: no buffer for GRPO, EBPO or the authors' DAPO (no dynamic sampling)
    for algo, env in (("grpo", {}), ("ebpo", {}), ("dapo", {"PROTOCOL": "authors"})):
        assert "TrackedReplayBuffer" not in " ".join(dry_command("qwen3_8b", algo, env)), algo
