"""Preflight sees the cluster and counts as verl counts: the shipped shapes of the recipes' models, the
config.json lookup without cache or Hub (bounded in time), GPU detection (nvidia-smi, Ray) against the declared
figures, the memory figures by hand (activations, the unsharded lm_head, the in-place logits gradient, the
CPU-offloaded reference, vLLM's start), the checkpoint peak and existing folders, steps per epoch against verl's real
dataset classes, and the first-run checks (wandb, /dev/shm, host memory, validation length). No GPU: detection is
faked (a stand-in nvidia-smi on PATH, Ray's answer monkeypatched)."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import preflight_standins as standins  # noqa: E402
from test_preflight import _one_line_refusal, _rows, _run, not_detected, readme_run  # noqa: E402,F401

from verl_ebpo.tools.preflight import cluster as cl  # noqa: E402
from verl_ebpo.tools.preflight import estimates as est  # noqa: E402
from verl_ebpo.tools.preflight import models  # noqa: E402

FREE = ["--free-disk-gb", "1000"]
RECIPE_IDS = {"Qwen/Qwen3-8B": "qwen3_8b", "Qwen/Qwen3-8B-Base": "qwen3_8b", "Qwen/Qwen3-14B": "qwen3_14b",
              "Qwen/Qwen3-14B-Base": "qwen3_14b", "meta-llama/Llama-3.1-8B-Instruct": "llama3_8b",
              "meta-llama/Llama-3.1-8B": "llama3_8b"}
KEYS = ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
        "vocab_size", "tie_word_embeddings", "torch_dtype")


def _replace(args, key, value):
    out = [a for a in args if not a.startswith(key + "=")]
    return out if value is None else out + [f"{key}={value}"]


# ---- the shipped shapes, the config.json lookup ------------------------------------------------------------------


def test_the_shipped_shapes_are_the_published_config_values():
    shapes = models.shipped_shapes()
    assert set(shapes) == set(RECIPE_IDS)  # every model a recipe names (model.env), post-trained and base
    for hub_id, tag in RECIPE_IDS.items():
        for key in KEYS:
            assert shapes[hub_id][key] == standins.SHAPES[tag][key], (hub_id, key)
    # the published values, written out (Qwen3-8B / -14B and Llama-3.1-8B config.json on the Hub)
    assert [shapes["Qwen/Qwen3-8B"][k] for k in KEYS] == [36, 4096, 12288, 32, 8, 151936, False, "bfloat16"]
    assert [shapes["Qwen/Qwen3-14B"][k] for k in KEYS] == [40, 5120, 17408, 40, 8, 151936, False, "bfloat16"]
    assert [shapes["meta-llama/Llama-3.1-8B-Instruct"][k] for k in KEYS] == [32, 4096, 14336, 32, 8, 128256, False,
                                                                             "bfloat16"]
    assert shapes["Qwen/Qwen3-8B"]["head_dim"] == shapes["Qwen/Qwen3-14B"]["head_dim"] == 128
    assert "head_dim" not in shapes["meta-llama/Llama-3.1-8B"]  # Llama's config.json has none: 4096 / 32 = 128
    counts = {h: est.param_count(s) for h, s in shapes.items()}
    assert counts["Qwen/Qwen3-8B"] == 8_190_735_360 and counts["Qwen/Qwen3-14B"] == 14_768_307_200
    assert counts["meta-llama/Llama-3.1-8B-Instruct"] == 8_030_261_248


@pytest.fixture()
def no_cache_no_hub(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.mark.parametrize("hub_id", sorted(RECIPE_IDS))
def test_a_recipe_model_without_cache_or_hub_gets_its_shipped_shape(readme_run, capsys, no_cache_no_hub, hub_id):
    _, args = readme_run
    rc, out, err = _run(capsys, [*FREE, *_replace(args, "actor_rollout_ref.model.path", hub_id)])
    assert rc == 0, err
    rows = _rows(out)
    billions = est.param_count(models.shipped_shapes()[hub_id]) / 1e9
    assert re.search(rf"model\s+ok\s+{billions:.2f} B parameters.* {re.escape(hub_id)}: the shape shipped", rows["model"])
    assert " ok " in rows["checkpoints"] and " ok " in rows["memory: update"]


def test_another_hub_id_without_cache_or_hub_is_a_warning_never_a_plain_ok(readme_run, capsys, no_cache_no_hub):
    _, args = readme_run
    rc, out, err = _run(capsys, [*FREE, *_replace(args, "actor_rollout_ref.model.path", "someone/Unknown-7B")])
    assert rc == 0, err
    rows = _rows(out)
    assert re.search(r"model\s+warn\s+no config.json: .*not estimated someone/Unknown-7B: no config.json", rows["model"])
    assert "warn" in rows["checkpoints"] and "warn" in rows["memory"]
    last = out.strip().splitlines()[-1]
    assert "warning" in last and "model" in last and "memory" in last and "ok: every check passed" not in out


def test_the_hub_lookup_is_bounded_in_time(monkeypatch, tmp_path):
    import huggingface_hub
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("VERL_EBPO_HUB_TIMEOUT_S", "0.5")
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda *a, **k: time.sleep(30))
    start = time.monotonic()
    found = models.find_config("someone/Slow-7B", str(tmp_path))
    assert found.config is None and "within 0.5 s" in found.where and time.monotonic() - start < 25  # not the 30 s hang
    config = tmp_path / "config.json"
    config.write_text(json.dumps(standins.SHAPES["qwen3_8b"]))
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda repo, name, **k: str(config))
    found = models.find_config("someone/Fast-8B", str(tmp_path))
    assert found.config["hidden_size"] == 4096 and found.where == str(config)


# ---- detection -----------------------------------------------------------------------------------------------


def _fake_nvidia_smi(folder: Path, mib: int, count: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / "nvidia-smi"
    exe.write_text("#!/bin/sh\n" + "".join(f"echo {mib}\n" for _ in range(count)))
    exe.chmod(0o755)


def test_local_gpus_are_detected_with_nvidia_smi(tmp_path, monkeypatch):
    _fake_nvidia_smi(tmp_path / "bin", 81_559, 8)  # H100 80GB
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    found = cl.detect(None)
    assert (found.nodes, found.gpus_per_node, found.total_gpus, found.local_gpus) == (None, 8, None, 8)  # other nodes?
    assert found.gpu_bytes == 81_559 * 2**20 and "nvidia-smi" in found.source
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,3")
    assert cl.detect(None).gpus_per_node == 2
    monkeypatch.setattr(cl, "_ray_nodes", lambda address, timeout: [8] * 4 + [0])  # + a CPU head
    found = cl.detect("http://head:8265")
    assert (found.nodes, found.gpus_per_node, found.total_gpus) == (4, 8, 32) and "Ray cluster at" in found.source
    monkeypatch.setattr(cl, "_ray_nodes", lambda address, timeout: None)  # the cluster does not answer
    found = cl.detect("http://head:8265")
    assert found.gpus_per_node == 2 and "did not answer" in found.source  # this machine's, said so
    assert found.unanswered == "http://head:8265"  # preflight's cluster row: a FAIL naming both fixes
    out = os.popen(f"PATH={tmp_path / 'bin'}:$PATH CUDA_VISIBLE_DEVICES= {sys.executable} -m "
                   "verl_ebpo.tools.preflight.cluster").read().split()
    assert out[:3] == ["-", "8", "85"]  # the recipes' defaults: NNODES (unknown: 1), N_GPUS_PER_NODE, GPU_MEMORY_GB


def _cluster(monkeypatch, nodes, per, gpu_bytes, host=2e12, local=0):
    from verl_ebpo.tools.preflight import checks

    found = cl.Cluster(nodes, per, nodes * per, gpu_bytes, host, local, f"stand-in: {nodes} x {per}")
    monkeypatch.setattr(checks, "detect_cluster", lambda ray_address=None: found)
    return found


def test_more_gpus_than_the_cluster_has_are_refused_with_the_fix(readme_run, capsys, monkeypatch):
    _, args = readme_run  # trainer.nnodes=4 x 8
    _cluster(monkeypatch, 1, 8, 81_559 * 2**20, local=8)
    rc, _, err = _run(capsys, [*FREE, *args])
    _one_line_refusal(rc, err, "cluster: 4 x 8 = 32 GPUs: the cluster has 8",
                      "set trainer.nnodes=1 (recipes: NNODES=1)", "141 GB (declared: --gpu-memory-gb); the GPUs here "
                      "have 85.5 GB; drop the option")
    _cluster(monkeypatch, 4, 4, 150.8e9)
    rc, _, err = _run(capsys, [*FREE, *args])
    _one_line_refusal(rc, err, "set trainer.n_gpus_per_node=4 (recipes: N_GPUS_PER_NODE=4)")
    # only this machine seen (no Ray address): its 8 GPUs fit n_gpus_per_node, the other 3 nodes are a warning
    from verl_ebpo.tools.preflight import checks

    here = cl.Cluster(None, 8, None, 150.8e9, 2e12, 8, "this machine: 8 GPU(s) (nvidia-smi)")
    monkeypatch.setattr(checks, "detect_cluster", lambda ray_address=None: here)
    rc, out, err = _run(capsys, [*FREE, *args])
    assert rc == 0 and re.search(r"cluster\s+warn\s+.*the other 3 node\(s\) are not seen.*fix: pass --ray-address",
                                 _rows(out)["cluster"]), err


def test_four_nodes_of_h200_pass_and_the_table_says_which_figure_it_used(readme_run, capsys, monkeypatch):
    _, args = readme_run
    _cluster(monkeypatch, 4, 8, 143_771 * 2**20)
    rc, out, err = _run(capsys, [*FREE, *args])
    assert rc == 0, err
    rows = _rows(out)
    assert re.search(r"cluster\s+ok\s+4 x 8 = 32 GPUs of 32 .*; stand-in: 4 x 8", rows["cluster"])
    assert "141 GB (declared: --gpu-memory-gb)" in rows["GPU memory"] and "of 141 GB (declared" in rows["memory: update"]
    rc, out, err = _run(capsys, [*FREE, *[a for i, a in enumerate(args) if a != "--gpu-memory-gb"
                                         and args[i - 1] != "--gpu-memory-gb"]])
    assert rc == 0 and "of 150.8 GB (detected)" in _rows(out)["memory: update"], err
    _cluster(monkeypatch, 4, 8, None)
    rc, out, _ = _run(capsys, [*FREE, *[a for i, a in enumerate(args) if a != "--gpu-memory-gb"
                                        and args[i - 1] != "--gpu-memory-gb"]])
    assert rc == 0 and re.search(r"GPU memory\s+warn\s+80.0 GB \(assumed\)", out)


# ---- the figures, by hand ------------------------------------------------------------------------------------


def test_memory_figures_by_hand():
    q8, q14 = standins.SHAPES["qwen3_8b"], standins.SHAPES["qwen3_14b"]
    assert est.checkpointed_inputs_bytes(24_576, 4096, 36) == 36 * 24_576 * 4096 * 2 == 7_247_757_312  # 7.2 GB
    # one layer with gradients: 24,576 x (2 x (4096 + 32 x 128 + 2 x 8 x 128) + 3 x 12,288) x 2 B x 2 = 5.6 GB
    assert est.layer_working_bytes(24_576, q8) == 24_576 * 57_344 * 4 == 5_637_144_576
    assert est.layer_working_bytes(24_576, q8, backward=False) == 5_637_144_576 // 2
    assert est.unsharded_head_bytes(151_936, 4096) == 151_936 * 4096 * 6 == 3_733_979_136
    assert est.unsharded_head_bytes(151_936, 4096, backward=False) == 151_936 * 4096 * 2
    # the reference's pinned CPU copy: fp32, one node of 8 = the whole model; 4 nodes: a quarter
    p14 = est.param_count(q14)
    assert est.host_reference_bytes(p14, 8, 8) == p14 * 4 == 59_073_228_800
    assert est.host_reference_bytes(8_190_735_360, 32, 8) == 8_190_735_360 * 4 // 4
    # vLLM's start, Qwen3-14B on one node of 8 x 80 GB: 12 B x 14.77 B / 8 = 22.15 GB stays on each GPU
    resident = est.learner_shards(p14, "fsdp", 8).params + est.learner_shards(p14, "fsdp", 8).optimizer
    assert resident == 22_152_460_800
    assert est.rollout_headroom(0.7, 80e9, resident) == pytest.approx(0.3 * 80e9 - 22_152_460_800 - 4e9)  # -2.2 GB
    assert est.rollout_headroom(0.7, 80e9, resident) < 0 < est.rollout_headroom(0.6, 80e9, resident)
    # the checkpoint peak: keep 1 writes the new one before removing the old; keep >= 2 removes first
    assert est.checkpoint_plan(17_398, 512, 100, 1000, 100, 1).peak == 2
    assert est.checkpoint_plan(17_398, 512, 100, 1000, 100, 2).peak == 2


def test_the_update_pass_counts_the_logits_once_without_entropy(readme_run, capsys):
    # README run, Qwen3-8B, 4 x 8: T = 2 x 12,288 micro-batch tokens; entropy_coeff 0 -> in-place logits gradient
    _, args = readme_run
    rc, out, err = _run(capsys, [*FREE, *args])
    assert rc == 0, err
    row = _rows(out)["memory: update"]
    t = 2 * 12_288
    logits = t * 151_936 * 2
    states = 16 * 8_190_735_360 // 32  # fp32 params 4 + grads 4 + AdamW 8 over 32 GPUs
    total = (logits + 36 * t * 4096 * 2 + t * 57_344 * 4 + 151_936 * 4096 * 6 + states + 4e9)
    assert f"logits (gradient in place) {logits / 1e9:.1f} GB" in row and f"= {total / 1e9:.1f} GB" in row
    assert f"states {12 * 8_190_735_360 // 32 / 1e9:.1f} GB" in _rows(out)["memory: ref log-prob"]
    rc, out, _ = _run(capsys, [*FREE, *args, "actor_rollout_ref.actor.entropy_coeff=0.001"])
    assert f"logits + gradient {2 * logits / 1e9:.1f} GB" in _rows(out)["memory: update"]


def test_existing_checkpoint_folders_count_in_the_disk_plan(readme_run, capsys):
    shared, args = readme_run
    ckpts = Path(next(a.split("=", 1)[1] for a in args if a.startswith("trainer.default_local_dir=")))
    for step in (100, 200):
        (ckpts / f"global_step_{step}" / "actor").mkdir(parents=True)
        (ckpts / f"global_step_{step}" / "actor" / "shard.pt").write_bytes(b"\0" * 1000)
    rc, out, err = _run(capsys, ["--free-disk-gb", "196.57764864", *args])  # exactly 2 x 12 B x 8.19 B: not the old ones
    _one_line_refusal(rc, err, "+ 2 old", "does not fit", "remove old global_step_* folders")
    rc, out, err = _run(capsys, ["--free-disk-gb", "196.57764864", *args])
    assert "+ 2 existing global_step_* folder(s)" in out and "never deletes these" in out


# ---- first-run checks -------------------------------------------------------------------------------------------


def test_wandb_without_a_key_is_refused_with_the_fix(readme_run, capsys, monkeypatch, tmp_path):
    _, args = readme_run
    for key in ("WANDB_API_KEY", "WANDB_MODE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    args = _replace(args, "trainer.logger", "[console,wandb]")
    rc, _, err = _run(capsys, [*FREE, *args])
    _one_line_refusal(rc, err, "logger: wandb:", "WANDB_API_KEY", "LOGGER=[console,file]")
    monkeypatch.setenv("WANDB_API_KEY", "x")
    rc, out, err = _run(capsys, [*FREE, *args])
    assert rc == 0 and re.search(r"logger: wandb\s+ok", out), err


def test_a_small_dev_shm_host_memory_and_a_long_validation(readme_run, capsys, monkeypatch):
    _, args = readme_run
    real = os.statvfs

    class Small:
        f_blocks, f_frsize = 64 * 2**20 // 4096, 4096  # Docker's 64 MB

    monkeypatch.setattr(os, "statvfs", lambda p: Small() if p == "/dev/shm" else real(p))
    _cluster(monkeypatch, 4, 8, 150.8e9, host=16e9, local=8)  # this machine trains: 8 GPUs, 16 GB of host memory
    args = _replace(_replace(args, "trainer.nnodes", 1), "actor_rollout_ref.rollout.val_kwargs.n", 16)
    rc, out, err = _run(capsys, [*FREE, "--shared-dir", "/", *args])
    # one node: the fp32 reference, 8.19 B x 4 B = 32.8 GB pinned, > 16 GB
    _one_line_refusal(rc, err, "/dev/shm: 64 MB", "--shm-size", "host memory:", "32.8 GB a node")
    # validation: 30 stand-in prompts x 16 answers of 8,192 / 2 tokens on 8 GPUs at 3,000 tokens/s a GPU: 82 s
    assert re.search(r"time \(estimate\)\s+est\s+~.* min a step.* validation\(s\) of ~1 min", _rows(out)["time (estimate)"])


# ---- steps per epoch: verl's own dataset classes --------------------------------------------------------------


def test_steps_per_epoch_equal_verls_len_dataset_over_batch(tmp_path, monkeypatch):
    """len(train_dataset) // train_batch_size of verl's RLHFDataset and of both ordered datasets (built for real on
    stand-in rows with a tiny tokenizer) equals the preflight's figure (hypothesis over rows, batch sizes and
    data.train_max_samples, which verl applies before the order: the first N rows, or N seeded at random when
    shuffled)."""
    from hypothesis import HealthCheck, given, settings, strategies as st
    from omegaconf import OmegaConf

    from verl.utils.dataset.rl_dataset import RLHFDataset
    from verl_ebpo.samplers.dataset import DifficultyOrderedDataset, TopicOrderedDataset
    from verl_ebpo.tools.preflight.checks import check_data, compose
    from verl_ebpo.tools.preflight.context import Context, Report
    from verl_ebpo.tools.tiny.assets import build_tokenizer

    tokenizer = build_tokenizer()
    classes = {"plain": RLHFDataset, "topic": TopicOrderedDataset, "difficulty": DifficultyOrderedDataset}
    counter = iter(range(10**6))

    @settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.integers(1, 70), st.integers(1, 32), st.sampled_from(sorted(classes)),
           st.one_of(st.just(-1), st.integers(1, 80)), st.booleans())
    def check(rows, batch, kind, max_samples, shuffle):
        folder = tmp_path / f"case{next(counter)}"
        train = standins.write(folder / "train.parquet", rows)
        val = standins.write(folder / "val.parquet", 3)
        overrides = [f"data.train_files={train}", f"data.val_files={val}", f"data.train_batch_size={batch}",
                     "data.dataloader_num_workers=0", "data.filter_overlong_prompts=False", "data.seed=7",
                     f"data.train_max_samples={max_samples}", f"data.shuffle={shuffle and kind == 'plain'}"]
        if kind != "plain":
            overrides += ["data.custom_cls.path=pkg://verl_ebpo.samplers.dataset",
                          f"data.custom_cls.name={classes[kind].__name__}"]
            if kind == "difficulty":
                overrides += ["+data.ordering.field=extra_info.difficulty_qwen3_8b"]
        cfg = compose(overrides)
        ctx = Context(cfg, str(folder), 1000.0, None, None)
        check_data(ctx, Report())
        dataset = classes[kind](data_files=[str(train)], tokenizer=tokenizer, config=cfg.data, max_samples=max_samples)
        assert ctx.train_len // batch == len(dataset) // batch, (rows, batch, kind, max_samples)

    check()
