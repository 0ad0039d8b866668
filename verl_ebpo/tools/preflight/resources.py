"""The preflight's verl-free checks of what the run needs: GPUs and their memory, the model, the checkpoint plan
against the disk, each pass's GPU memory, host memory, /dev/shm, wandb, paths on several nodes, and the time
estimate (the formulas: `estimates`, docs/preflight.md)."""

from __future__ import annotations

import math
import netrc
import os
import re
import shutil
from typing import Optional

from verl_ebpo.tools.preflight import estimates as est
from verl_ebpo.tools.preflight.context import A, F, R, Context, Report, backend, files, gb, local, remote, sel, num

ASSUMED_GPU_GB = 80.0  # one GPU's memory when it is neither declared nor detected (the smaller common size)
GPU_MISMATCH = 0.10  # declared vs detected further apart than this share: FAIL (declared above) / warn
# (a vendor's "80 GB" is 80 GiB: nvidia-smi reports 81,559 MiB = 85.5e9 bytes, 7 % above 80e9)
SHM_MIN = 1 * est.GB  # NCCL's shared-memory transport and Ray's object store need more than Docker's 64 MB default


def check_cluster(ctx: Context, report: Report, declared_gb: Optional[float]) -> None:
    """The cluster row, and the GPU memory every estimate uses: declared, detected or assumed (ctx.gpu_bytes)."""
    found, nnodes, per = ctx.cluster, ctx.nnodes, ctx.per_node
    want, n = f"{nnodes} x {per} = {nnodes * per} GPUs", found.gpus_per_node
    rows = [(found.unanswered, "FAIL", f"no Ray cluster answers at {found.unanswered}",
             "start one with `ray start --head`, or run on this node (recipes: LAUNCH=local)"),
            (n is None, "warn", "as declared, not checked (no GPU seen)", ""),
            (n == 0, "FAIL", "the Ray cluster has no GPU node", ""),
            (bool(n) and per > n, "FAIL", f"a node has {n}", f"set trainer.n_gpus_per_node={n} (recipes: "
             f"N_GPUS_PER_NODE={n})"),
            (found.nodes is None and nnodes > 1, "warn", f"the other {nnodes - 1} node(s) are not seen",
             "pass --ray-address (or set RAY_ADDRESS) to check them"),
            ((found.nodes or nnodes) < nnodes, "FAIL", f"the cluster has {found.total_gpus}",
             f"set trainer.nnodes={found.nodes} (recipes: NNODES={found.nodes})")]
    status, what, fix = next((r[1:] for r in rows if r[0]), ("ok", f"of {found.total_gpus or n}", ""))
    report.add("cluster", status, f"{want} {what}" if status == "ok" else f"{want}: {what}",
               f"trainer.nnodes={nnodes} x trainer.n_gpus_per_node={per}; {found.source}", fix)
    detected, status, fix = found.gpu_bytes, "ok", ""
    if declared_gb is None:
        ctx.gpu_bytes = detected or ASSUMED_GPU_GB * est.GB
        ctx.gpu_source = f"{ctx.gpu_bytes / est.GB:.1f} GB ({'detected' if detected else 'assumed'})"
        status, fix = ("ok", "") if detected else ("warn", "--gpu-memory-gb (recipes: GPU_MEMORY_GB)")
    else:
        ctx.gpu_bytes, ctx.gpu_source = declared_gb * est.GB, f"{declared_gb:g} GB (declared: --gpu-memory-gb)"
        gap = 0 if detected is None else (ctx.gpu_bytes - detected) / detected
        status, fix = ("FAIL", "drop the option (recipes: unset GPU_MEMORY_GB)") if gap > GPU_MISMATCH else \
            ("warn", "the estimates use the declared figure") if gap < -GPU_MISMATCH else ("ok", "")
    seen = f"; the GPUs here have {detected / est.GB:.1f} GB" if detected and status != "ok" else ""
    report.add("GPU memory", status, f"{ctx.gpu_source}{seen}", f"one GPU: {ctx.gpu_source}", fix)


def check_model(ctx: Context, report: Report) -> None:
    from verl_ebpo.tools.preflight.models import find_config

    path = str(sel(ctx.cfg, "actor_rollout_ref.model.path"))
    found = find_config(path, ctx.working_dir)
    if found.fail:
        report.add("model", "FAIL", found.where, f"actor_rollout_ref.model.path={path}: verl reads its config.json",
                   "point actor_rollout_ref.model.path at a model folder with a valid config.json")
        return
    data = found.config or {}
    data = data.get("text_config", data) if "hidden_size" not in data else data
    dtype = data.get("torch_dtype") or data.get("dtype")
    try:
        params = est.param_count(data) if found.config else est.dtype_bytes("no config.json")
        est.dtype_bytes(dtype)
    except est.EstimateError as exc:
        report.add("model", "warn", f"{'no config.json' if found.config is None else exc}: checkpoints and memory "
                   "not estimated", found.where)
        return
    ctx.params, ctx.model_cfg = params, data
    report.add("model", "ok", f"{params / 1e9:.2f} B parameters, {data['num_hidden_layers']} layers, {dtype or 'bfloat16'}",
               f"{found.where}: hidden {data['hidden_size']}, vocabulary {data['vocab_size']:,}")


def check_checkpoints(ctx: Context, report: Report) -> Optional[int]:
    """The checkpoint row; returns the run's steps (None when unknown)."""
    cfg = ctx.cfg
    steps = num(cfg, "trainer.total_training_steps", int, 1, none_ok=True)
    if ctx.train_len is None and steps is None:
        report.add("checkpoints", "warn", "not planned: the number of steps is unknown",
                   "the training set's length is unknown and no trainer.total_training_steps is set")
        return None
    keep, freq = num(cfg, "trainer.max_actor_ckpt_to_keep", int, none_ok=True), num(cfg, "trainer.save_freq", int)
    plan = est.checkpoint_plan(ctx.train_len or 0, num(cfg, "data.train_batch_size", int, 1),
                               num(cfg, "trainer.total_epochs", int, 1), steps, freq, keep)
    contents = list(sel(cfg, f"{A}.checkpoint.save_contents") or [])
    head = f"{plan.total_steps:,} steps, {plan.saves} saves (every {freq}), {plan.kept} kept"
    detail = f"{head} (max_actor_ckpt_to_keep={keep}), save_contents={contents}" + (
        f", {plan.peak} at the peak (keep 1: the new one is written before the old one goes)"
        if plan.peak > plan.kept else "")
    if ctx.params is None:
        report.add("checkpoints", "warn", f"{head}; size not estimated", detail)
        return plan.total_steps
    hf_bytes = est.dtype_bytes(ctx.model_cfg.get("torch_dtype") or ctx.model_cfg.get("dtype"))
    per = sum(est.checkpoint_bytes(ctx.params, backend(cfg), contents,
                                   est.dtype_bytes(sel(cfg, f"{A}.fsdp_config.model_dtype"), 4), hf_bytes).values())
    count, folder = max(plan.kept, plan.peak), local(str(sel(cfg, "trainer.default_local_dir")), ctx.working_dir)
    old = [os.path.join(folder, n) for n in (os.listdir(folder) if os.path.isdir(folder) else ())
           if re.fullmatch(r"global_step_\d+", n) and os.path.isdir(os.path.join(folder, n))]
    old_bytes = sum(os.path.getsize(os.path.join(r, f)) for d in old for r, _, fs in os.walk(d) for f in fs
                    if not os.path.islink(os.path.join(r, f)))
    probe = folder
    while not os.path.isdir(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    free = est.GB * ctx.free_disk_gb if ctx.free_disk_gb is not None else float(shutil.disk_usage(probe).free)
    where = f"{folder} (--free-disk-gb)" if ctx.free_disk_gb is not None else f"{probe} (free space now)"
    figure = f"{count} x {gb(per)} = {gb(count * per)}" + (f" + {len(old)} old" if old else "") + f", free {gb(free)}"
    detail += f"; free at {where}" + (f"; + {len(old)} existing global_step_* folder(s), {gb(old_bytes)}: verl's "
                                      "rotation list starts empty at each start, it never deletes these" if old else "")
    fits = count * per + old_bytes <= free
    report.add("checkpoints", "ok" if fits else "FAIL", f"{plan.total_steps:,} steps: {figure}" +
               ("" if fits else ": does not fit"), detail, "" if fits else "lower trainer.max_actor_ckpt_to_keep or "
               "trainer.save_freq, or save_contents" + (", or remove old global_step_* folders" if old else ""))
    return plan.total_steps


def _tokens(cfg, prefix: str, dyn_key: str, max_key: str, mbs_key: str, seq: int):
    """Tokens of one micro-batch on one GPU, and the key that sets it."""
    if sel(cfg, f"{prefix}.{dyn_key}"):
        return num(cfg, f"{prefix}.{max_key}", int, 1), f"{prefix}.{max_key}"
    mbs = num(cfg, f"{prefix}.{mbs_key}", int, 1, none_ok=True)
    return (mbs * seq if mbs else None), f"{prefix}.{mbs_key}"


def check_memory(ctx: Context, report: Report) -> None:
    cfg, gpu, label = ctx.cfg, ctx.gpu_bytes, ctx.gpu_source
    if ctx.params is None:
        report.add("memory", "warn", "GPU memory not estimated (no model config.json)")
        return
    fsdp, engine = backend(cfg) == "fsdp", "fsdp_config" if backend(cfg) == "fsdp" else "megatron"
    world = ctx.nnodes * ctx.per_node
    tp, pp, cp = (1, 1, 1) if fsdp else tuple(num(cfg, f"{A}.megatron.{k}_parallel_size", int, 1, none_ok=True) or 1
                                              for k in ("tensor_model", "pipeline_model", "context"))
    shards = est.learner_shards(ctx.params, backend(cfg), world, tp=tp, pp=pp, cp=cp,
                                model_bytes=est.dtype_bytes(sel(cfg, f"{A}.fsdp_config.model_dtype"), 4),
                                param_offload=bool(sel(cfg, f"{A}.{engine}.param_offload")),
                                optimizer_offload=bool(sel(cfg, f"{A}.{engine}.optimizer_offload")))
    # FSDP2 gives a forward-only model CPUOffloadPolicy whatever ref.fsdp_config.param_offload says
    # (workers/engine/fsdp/transformer_impl.py:462): the reference holds no GPU memory between passes
    ref_gpu = ctx.uses_ref and not fsdp and not sel(cfg, f"{F}.megatron.param_offload")
    resident = shards.params + shards.optimizer + (
        est.learner_shards(ctx.params, "megatron", world, tp=tp, pp=pp, cp=cp).params if ref_gpu else 0)
    util = num(cfg, f"{R}.gpu_memory_utilization", float, 0, 1)
    left = est.rollout_headroom(util, gpu, resident)
    fits = math.floor((1 - (resident + est.RUNTIME_OVERHEAD) / gpu) * 20) / 20  # a multiple of 0.05
    report.add("memory: rollout", "ok" if left >= 0 else "FAIL", f"vLLM at {util:g}: "
               f"{gb(left + est.RUNTIME_OVERHEAD)} left beside {gb(resident)} of learner state"
               + ("" if left >= 0 else ": vLLM would refuse to start"),
               f"vLLM starts when gpu_memory_utilization {util:g} x {label} is free: (1 - {util:g}) x GPU - resident "
               f"learner state {gb(resident)} = {gb(left + est.RUNTIME_OVERHEAD)} left for CUDA contexts, NCCL and "
               f"graphs (margin {gb(est.RUNTIME_OVERHEAD)})", "" if left >= 0 else
               f"set {R}.gpu_memory_utilization={fits:g} (recipes: GPU_MEM_UTIL={fits:g})" if fits >= 0.3
               else "set OFFLOAD=True (actor param/optimizer offload) or use more GPUs")
    cm = ctx.model_cfg
    vocab, hidden, layers = (int(cm[k]) for k in ("vocab_size", "hidden_size", "num_hidden_layers"))
    seq = num(cfg, "data.max_prompt_length", int, 1) + num(cfg, "data.max_response_length", int, 1)
    chunk = num(cfg, f"{A}.entropy_from_logits_chunk_size", int, 1, none_ok=True) or 2048
    chunked = bool(sel(cfg, f"{A}.entropy_from_logits_with_chunking"))
    ckpt = sel(cfg, "actor_rollout_ref.model.enable_gradient_checkpointing") is not False
    ent = bool(sel(cfg, f"{A}.calculate_entropy")) or (num(cfg, f"{A}.entropy_coeff", float, none_ok=True) or 0) != 0
    log_prob = ("log_prob_use_dynamic_bsz", "log_prob_max_token_len_per_gpu", "log_prob_micro_batch_size_per_gpu", seq)
    passes = [("old log-prob", *_tokens(cfg, R, *log_prob), True, False, resident),
              ("ref log-prob", *_tokens(cfg, F, *log_prob), False, False, resident),
              ("update", *_tokens(cfg, A, "use_dynamic_bsz", "ppo_max_token_len_per_gpu", "ppo_micro_batch_size_per_gpu",
                                  seq), ent, True, resident + shards.grads)]
    for name, tokens, key, entropy, backward, states in passes:
        if not tokens or name == "ref log-prob" and not ctx.uses_ref:
            continue
        # in-place logits gradient (flash-attn's cross entropy, inplace_backward=True) unless entropy is computed
        # (workers/engine/fsdp/transformer_impl.py:1425-1427)
        copies = 2 if backward and entropy else 1
        parts = {f"logits{' + gradient' if copies == 2 else ' (gradient in place)' if backward else ''}":
                 copies * est.logits_bytes(tokens, vocab, tp)}
        if entropy:
            parts[f"entropy ({'chunked' if chunked else 'not chunked'})"] = est.entropy_bytes(tokens, vocab, tp,
                                                                                            chunked, chunk)
        if backward:
            parts["checkpointed layer inputs" if ckpt else "all layers"] = (
                est.checkpointed_inputs_bytes(tokens, hidden, layers // pp) if ckpt
                else layers // pp * est.layer_working_bytes(tokens, cm, backward=False)) // tp
        parts.update({"one layer": est.layer_working_bytes(tokens, cm, backward=backward) // tp,
                      "unsharded lm_head": est.unsharded_head_bytes(vocab, hidden, backward) // tp,
                      "states": states, "runtime": est.RUNTIME_OVERHEAD})
        total = sum(parts.values())
        v = "FAIL" if total > gpu else "warn" if total > est.TIGHT * gpu else "ok"
        fix = "" if v != "FAIL" else f"lower {key}" + (
            " or set actor_rollout_ref.actor.entropy_from_logits_with_chunking=True" if entropy and not chunked else "")
        report.add(f"memory: {name}", v, f"{gb(total)} of {gb(gpu)} at {tokens:,} tokens/GPU",
                   f"{tokens:,} tokens/GPU x {vocab:,} vocabulary{f' / TP {tp}' if tp > 1 else ''}: "
                   f"{' + '.join(f'{k} {gb(b)}' for k, b in parts.items())} = {gb(total)} of {label}", fix)


def _wandb_key() -> Optional[str]:
    """Where a wandb key is found on this machine, or None."""
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_MODE", "").lower() in ("offline", "disabled", "dryrun"):
        return "WANDB_API_KEY" if os.environ.get("WANDB_API_KEY") else f"WANDB_MODE={os.environ['WANDB_MODE']}"
    try:
        path = os.environ.get("NETRC") or os.path.expanduser("~/.netrc")
        return path if os.path.isfile(path) and netrc.netrc(path).authenticators("api.wandb.ai") else None
    except (OSError, netrc.NetrcParseError):
        return None


def check_host(ctx: Context, report: Report) -> None:
    cfg, logger = ctx.cfg, sel(ctx.cfg, "trainer.logger") or []
    if "wandb" in ([logger] if isinstance(logger, str) else logger):
        where = _wandb_key()
        report.add("logger: wandb", "FAIL" if where is None else "ok", f"a key is set here ({where}); every node needs"
                   " it too" if where else "no wandb key here (WANDB_API_KEY, ~/.netrc)",
                   "verl starts the logger after the workers load: without a key the run stops minutes in",
                   "" if where else "export WANDB_API_KEY on every node before `ray start`, or LOGGER=[console,file]")
    try:
        size = os.statvfs("/dev/shm").f_blocks * os.statvfs("/dev/shm").f_frsize
    except OSError:
        size = 0
    if size < SHM_MIN:  # a warning where this machine is not a node (no GPU here)
        report.add("/dev/shm", "FAIL" if ctx.cluster.local_gpus else "warn", f"{size / 2**20:,.0f} MB on this "
                   "machine", "NCCL's shared-memory transport and Ray's object store fail with Docker's 64 MB",
                   "start the container with --ipc=host or --shm-size=16g")
    if ctx.params is None or backend(cfg) != "fsdp" or not ctx.uses_ref:
        return
    need = est.host_reference_bytes(ctx.params, ctx.nnodes * ctx.per_node, ctx.per_node,
                                     est.dtype_bytes(sel(cfg, f"{F}.fsdp_config.model_dtype"), 4))
    offloaded = [(n, b) for n, k, b in (("parameters", "param_offload", 4), ("optimizer", "optimizer_offload", 8))
                 if sel(cfg, f"{A}.fsdp_config.{k}")]  # the actor's offloaded parts, pinned on the host too
    need += sum(ctx.params * b // ctx.nnodes for _, b in offloaded)
    what = "the reference model's pinned CPU copy (FSDP2 offloads a forward-only model)" + "".join(
        f" + the actor's offloaded {n}" for n, _ in offloaded)
    host = ctx.cluster.host_bytes
    status = "warn" if host is None else "FAIL" if need > 0.9 * host else "ok"
    report.add("host memory", status, f"{gb(need)} a node " + (
        "(host memory unknown)" if host is None else f"of {gb(host)}" if status == "ok" else f"> 90 % of {gb(host)}"),
        what, "more nodes (trainer.nnodes) shard it thinner, or --host-memory-gb" if status == "FAIL" else "")


def check_time(ctx: Context, report: Report, steps: Optional[int]) -> None:
    """The estimated time a step and of the run with its validations, in hours and GPU-hours (est.step_seconds)."""
    cfg, gpus = ctx.cfg, ctx.nnodes * ctx.per_node
    if ctx.params is None:
        return
    resp, freq = num(cfg, "data.max_response_length", int, 1), num(cfg, "trainer.test_freq", int, none_ok=True) or -1
    rollout, learner = est.step_seconds(ctx.params, num(cfg, "data.train_batch_size", int, 1), num(cfg, f"{R}.n", int, 1),
                                        num(cfg, "data.max_prompt_length", int, 1), resp, gpus, ctx.uses_ref)
    vals = int(bool(sel(cfg, "trainer.val_before_train"))) + ((steps or 0) // freq if freq > 0 else 0)
    val = (ctx.val_rows or 0) * (num(cfg, f"{R}.val_kwargs.n", int, 1, none_ok=True) or 1) * resp / 2 / (
        est.DECODE_TOKENS_PER_S * gpus)
    hours = ((rollout + learner) * (steps or 0) + val * vals) / 3600
    report.add("time (estimate)", "est", f"~{(rollout + learner) / 60:,.1f} min a step" + (
        f" x {steps:,} = ~{hours / 24:,.1f} days, {hours * gpus:,.0f} GPU-hours" if steps else ""),
        f"rollout ~{rollout / 60:,.1f} min + learner ~{learner / 60:,.1f} min a step, {vals} validation(s) of "
        f"~{val / 60:,.0f} min (nothing printed meanwhile); an estimate, not measured: prompts and answers at half "
        f"their limits, {est.DECODE_TOKENS_PER_S:,.0f} generated tokens/s a GPU, {est.LEARNER_FLOPS / 1e12:,.0f} "
        "TFLOP/s a GPU for the learner (docs/preflight.md#time); DAPO generates more answers a step")


def _under(path: str, folder: str) -> bool:
    path, folder = os.path.normpath(path), os.path.normpath(folder)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def check_nodes(ctx: Context, report: Report) -> None:
    """The metrics file's folder (verl's file logger does not make it), and on several nodes every path shared."""
    cfg, nnodes, logger = ctx.cfg, ctx.nnodes, sel(ctx.cfg, "trainer.logger") or []
    metrics = sel(cfg, "ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH") or os.environ.get(
        "VERL_FILE_LOGGER_PATH") if "file" in ([logger] if isinstance(logger, str) else logger) else None
    if metrics is not None:
        folder = os.path.dirname(local(str(metrics), ctx.working_dir))
        made = not os.path.isdir(folder) and any(_under(folder, local(c, ctx.working_dir)) for c in ctx.creates)
        report.add("metrics file", "ok" if os.path.isdir(folder) or made else "FAIL", "its folder is made by the "
                   "launcher (--creates)" if made else "its folder exists" if os.path.isdir(folder) else
                   "its folder does not exist (verl's file logger does not make it)", str(metrics),
                   "" if os.path.isdir(folder) or made else f"mkdir -p {folder}")
    shared, home = ctx.shared_dir, os.path.expanduser("~")
    if nnodes <= 1:
        return
    if not shared or not os.path.isabs(shared) or not os.path.isdir(shared):
        report.add("several nodes", "FAIL", f"trainer.nnodes={nnodes}: no shared folder {shared or ''}".rstrip(),
                   "checkpoints, data and metrics must be on a folder every node mounts",
                   "declare it with --shared-dir or SHARED_DIR (an absolute path to a folder)")
        return
    paths = [("trainer.default_local_dir", str(sel(cfg, "trainer.default_local_dir")))] + [
        (f"data.{w}_files", str(f)) for w in ("train", "val") for f in files(sel(cfg, f"data.{w}_files"))
        if not remote(str(f))] + ([("the metrics file (VERL_FILE_LOGGER_PATH)", str(metrics))] if metrics else [])
    for key, path in paths:
        full = os.path.expanduser(path)
        if not os.path.isabs(full) or not _under(full, shared):
            where = (" (relative)" if not os.path.isabs(full) else " ($HOME of this machine)" if _under(full, home)
                     else " (/tmp, local to each node)" if _under(full, "/tmp") else "")
            report.add("several nodes", "FAIL", f"trainer.nnodes={nnodes}: {key} is not under the shared folder",
                       f"{key} {path}{where}; shared folder {shared}", f"put it under {shared}")
            return
    report.add("several nodes", "ok", f"{nnodes} nodes: checkpoints, data and metrics under {shared}")
