"""The preflight's verl-free checks: the model, the checkpoint plan against disk, several nodes, backend caveats."""

from __future__ import annotations

import os
import shutil
from typing import Optional

from verl_ebpo.tools.preflight import estimates as est
from verl_ebpo.tools.preflight.context import METRICS_KEY, Context, Report, _files, _gb, _local, _remote, _sel, num

# ---- the model, the checkpoint plan -------------------------------------------------------------------------------


def check_model(ctx: Context, report: Report) -> None:
    from verl_ebpo.tools.preflight.models import find_config

    path = str(_sel(ctx.cfg, "actor_rollout_ref.model.path"))
    found = find_config(path, ctx.working_dir)
    if found.missing_local:
        report.add("model", "FAIL", f"actor_rollout_ref.model.path: {found.where} (a local path; an HF id is "
                   "written org/name)")
        return
    data = found.config
    if data is None:
        report.add("model", "warn", f"{found.where}: checkpoint size and GPU memory not estimated")
        return
    data = data.get("text_config", data) if "hidden_size" not in data else data
    dtype = data.get("torch_dtype") or data.get("dtype")
    try:
        params = est.param_count(data)
        est.dtype_bytes(dtype)
    except est.EstimateError as exc:
        report.add("model", "warn", f"{found.where}: {exc}: checkpoint size and GPU memory not estimated")
        return
    ctx.params, ctx.model_cfg = params, data
    report.add("model", "ok", f"{params / 1e9:.2f} B parameters ({found.where}: {data['num_hidden_layers']} layers, "
               f"hidden {data['hidden_size']}, vocabulary {data['vocab_size']:,}, {dtype or 'bfloat16'})")


def _backend(cfg) -> str:
    return "megatron" if str(_sel(cfg, "actor_rollout_ref.actor.strategy")) == "megatron" else "fsdp"


def _free_bytes(ctx: Context, folder: str) -> tuple[float, str]:
    if ctx.free_disk_gb is not None:
        return ctx.free_disk_gb * est.GB, f"{folder} (--free-disk-gb)"
    probe = folder
    while not os.path.isdir(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    return float(shutil.disk_usage(probe).free), f"{probe} (free space now)"


def _existing(folder: str) -> tuple[list, int]:
    """The `global_step_N` folders already in `folder` (N sorted) and their bytes on disk."""
    steps, total = [], 0
    if not os.path.isdir(folder):
        return steps, 0
    for name in os.listdir(folder):
        sub = os.path.join(folder, name)
        if name.startswith("global_step_") and name[12:].isdigit() and os.path.isdir(sub):
            steps.append(int(name[12:]))
            for root, _, files in os.walk(sub):
                total += sum(os.path.getsize(os.path.join(root, f)) for f in files
                             if not os.path.islink(os.path.join(root, f)))
    return sorted(steps), total


def check_checkpoints(ctx: Context, report: Report) -> None:
    cfg = ctx.cfg
    steps = num(cfg, "trainer.total_training_steps", int, 1, none_ok=True)
    if ctx.train_len is None and steps is None:
        report.add("checkpoints", "warn", "not planned: the training set's length is unknown and no "
                   "trainer.total_training_steps is set (disk use not checked)")
        return
    keep = num(cfg, "trainer.max_actor_ckpt_to_keep", int, none_ok=True)
    freq = num(cfg, "trainer.save_freq", int)
    plan = est.checkpoint_plan(ctx.train_len or 0, num(cfg, "data.train_batch_size", int, 1),
                               num(cfg, "trainer.total_epochs", int, 1), steps, freq, keep)
    contents = list(_sel(cfg, "actor_rollout_ref.actor.checkpoint.save_contents") or [])
    peak = f", {plan.peak} at the peak (keep 1: the new one is written before the old one goes)" \
        if plan.peak > plan.kept else ""
    head = (f"{plan.total_steps:,} steps, {plan.saves} saves (every {freq}), {plan.kept} kept "
            f"(max_actor_ckpt_to_keep={keep}){peak}, save_contents={contents}")
    if ctx.params is None:
        report.add("checkpoints", "warn", f"{head}; size not estimated (no model config.json): disk use not checked")
        return
    backend = _backend(cfg)
    model_bytes = est.dtype_bytes(_sel(cfg, "actor_rollout_ref.actor.fsdp_config.model_dtype"), 4)
    hf_bytes = est.dtype_bytes(ctx.model_cfg.get("torch_dtype") or ctx.model_cfg.get("dtype"))
    parts = est.checkpoint_bytes(ctx.params, backend, contents, model_bytes, hf_bytes)
    per = sum(parts.values())
    total = plan.total_bytes(per)
    folder = _local(str(_sel(cfg, "trainer.default_local_dir")), ctx.working_dir)
    old_steps, old_bytes = _existing(folder)
    old = ""
    if old_steps:
        old = (f" + {len(old_steps)} existing global_step_* folder(s) {_gb(old_bytes)} (verl's rotation list starts "
               "empty at each start: it never deletes these)")
    free, where = _free_bytes(ctx, folder)
    count = max(plan.kept, plan.peak)
    figure = f"{head}: {count} x {_gb(per)} = {_gb(total)}{old}; free {_gb(free)} at {where}"
    if total + old_bytes > free:
        report.add("checkpoints", "FAIL", f"{figure}: does not fit; set trainer.max_actor_ckpt_to_keep, "
                   "trainer.total_training_steps, trainer.save_freq or actor checkpoint.save_contents"
                   + (", or remove old global_step_* folders" if old_steps else ""))
    else:
        report.add("checkpoints", "ok", figure)
    if "optimizer" not in contents and plan.saves:
        report.add("checkpoints: resume", "warn", "save_contents has no optimizer: a resumed run restarts AdamW's "
                   "moments (the weights and the data position are restored)")


# ---- several nodes -----------------------------------------------------------------------------------------------


def _under(path: str, folder: str) -> bool:
    path, folder = os.path.normpath(path), os.path.normpath(folder)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _metrics_file(cfg) -> Optional[str]:
    loggers = _sel(cfg, "trainer.logger") or []
    loggers = [loggers] if isinstance(loggers, str) else loggers
    if "file" not in loggers:
        return None
    return _sel(cfg, METRICS_KEY) or os.environ.get("VERL_FILE_LOGGER_PATH")


def check_nodes(ctx: Context, report: Report) -> None:
    cfg = ctx.cfg
    nnodes = num(cfg, "trainer.nnodes", int, 1)
    metrics = _metrics_file(cfg)
    if metrics is not None:
        folder = os.path.dirname(_local(str(metrics), ctx.working_dir))
        if not os.path.isdir(folder):
            report.add("metrics file", "FAIL", f"the folder of the metrics file {metrics} does not exist "
                       "(verl's file logger does not create it): mkdir -p it first")
        else:
            report.add("metrics file", "ok", f"{metrics}")
    if nnodes <= 1:
        report.add("several nodes", "n/a", "one node: paths need not be shared")
        return
    if not ctx.shared_dir:
        report.add("several nodes", "FAIL", f"trainer.nnodes={nnodes}: declare the folder every node mounts with "
                   "--shared-dir or SHARED_DIR (checkpoints, data and metrics must be under it)")
        return
    shared = ctx.shared_dir
    if not os.path.isabs(shared) or not os.path.isdir(shared):
        report.add("several nodes", "FAIL", f"the shared folder {shared!r} must be an absolute path to a folder")
        return
    paths = [("trainer.default_local_dir", str(_sel(cfg, "trainer.default_local_dir")))]
    for which in ("train", "val"):
        paths += [(f"data.{which}_files", str(f)) for f in _files(_sel(cfg, f"data.{which}_files")) if not _remote(str(f))]
    if metrics is not None:
        paths.append(("the metrics file (VERL_FILE_LOGGER_PATH)", str(metrics)))
    home = os.path.expanduser("~")
    for key, path in paths:
        expanded = os.path.expanduser(path)
        if not os.path.isabs(expanded):
            report.add("several nodes", "FAIL", f"{key} {path!r} is relative: on several nodes it must be an absolute "
                       f"path under the shared folder {shared}")
            return
        if not _under(expanded, shared):
            where = (" ($HOME of this machine)" if _under(expanded, home) else
                     " (/tmp, local to each node)" if _under(expanded, "/tmp") else "")
            report.add("several nodes", "FAIL", f"trainer.nnodes={nnodes}: {key} {path} is not under the shared "
                       f"folder {shared}{where}")
            return
    report.add("several nodes", "ok", f"{nnodes} nodes: checkpoints, data and metrics under {shared}")


def check_backend(ctx: Context, report: Report) -> None:
    cfg = ctx.cfg
    notes = []
    if _sel(cfg, "actor_rollout_ref.rollout.name") == "sglang":
        notes.append("SGLang in verl 0.9.1 receives neither actor_rollout_ref.rollout.seed (the rollout is not seeded) "
                     "nor rollout.max_num_batched_tokens")
    if _backend(cfg) == "megatron":
        sp = [k for k in ("actor_rollout_ref.actor.ulysses_sequence_parallel_size",
                          "actor_rollout_ref.ref.ulysses_sequence_parallel_size") if (num(cfg, k, int, 1, none_ok=True) or 1) > 1]
        if sp:
            notes.append(f"Megatron ignores {', '.join(sp)} (Ulysses is FSDP's): use "
                         "actor_rollout_ref.actor.megatron.context_parallel_size")
    rollout = _sel(cfg, "actor_rollout_ref.rollout.name")
    if not rollout:
        report.add("backend", "FAIL", f"{_backend(cfg)} learner, no rollout engine: verl requires "
                   "actor_rollout_ref.rollout.name (vllm or sglang)")
        return
    for note in notes:
        report.add("backend", "warn", f"{_backend(cfg)} + {rollout}: {note}")
    if not notes:
        report.add("backend", "ok", f"{_backend(cfg)} + {rollout}: no known caveat")
