"""The preflight's checks of the cluster and the hosts: GPUs detected against trainer.nnodes x n_gpus_per_node and
the declared GPU memory, the wandb logger's credentials, /dev/shm, host memory for the CPU-offloaded reference
model, and the validation pass's length (docs/preflight.md). verl-free."""

from __future__ import annotations

import netrc
import os
from typing import Optional

from verl_ebpo.tools.preflight import estimates as est
from verl_ebpo.tools.preflight.context import Context, Report, _files, _gb, _sel, num

ASSUMED_GPU_GB = 80.0  # one GPU's memory when it is neither declared nor detected (the smaller common size)
GPU_MISMATCH = 0.10  # declared vs detected GPU memory further apart than this share: FAIL (declared above) / warn
# (a vendor's "80 GB" is 80 GiB: nvidia-smi reports 81,559 MiB = 85.5e9 bytes, 7 % above 80e9)
SHM_MIN = 1 * est.GB  # NCCL's shared-memory transport and Ray's object store need more than Docker's 64 MB default
VAL_TOKENS_PER_S_PER_GPU = 3000.0  # vLLM decode throughput per GPU at 8k-token answers, an estimate (issue 37)


def gpu_memory(declared_gb: Optional[float], cluster) -> tuple[float, str, Optional[tuple]]:
    """(bytes used for one GPU, its source for the table, a (status, figure) row for the cluster check or None)."""
    detected = cluster.gpu_bytes if cluster is not None else None
    if declared_gb is None and detected is None:
        return ASSUMED_GPU_GB * est.GB, f"{ASSUMED_GPU_GB:g} GB (assumed: not detected, not declared)", (
            "warn", f"one GPU's memory assumed {ASSUMED_GPU_GB:g} GB: no GPU detected here; declare it with "
            "--gpu-memory-gb (recipes: GPU_MEMORY_GB)")
    if declared_gb is None:
        return detected, f"{detected / est.GB:.1f} GB (detected)", None
    declared = declared_gb * est.GB
    label = f"{declared_gb:g} GB (declared: --gpu-memory-gb)"
    if detected is None:
        return declared, label, None
    gap = (declared - detected) / detected
    if gap > GPU_MISMATCH:
        return declared, label, ("FAIL", f"--gpu-memory-gb {declared_gb:g} but the GPUs here have "
                                 f"{detected / est.GB:.1f} GB: drop the option (recipes: unset GPU_MEMORY_GB) to use "
                                 "the detected figure")
    if gap < -GPU_MISMATCH:
        return declared, label, ("warn", f"--gpu-memory-gb {declared_gb:g} is below the detected "
                                 f"{detected / est.GB:.1f} GB: the estimates use the declared figure")
    return declared, label, None


def check_cluster(ctx: Context, report: Report, memory_row: Optional[tuple]) -> None:
    cfg, found = ctx.cfg, ctx.cluster
    nnodes = num(cfg, "trainer.nnodes", int, 1)
    per = num(cfg, "trainer.n_gpus_per_node", int, 1)
    want = f"trainer.nnodes={nnodes} x trainer.n_gpus_per_node={per} = {nnodes * per} GPUs"
    if found is None or not found.detected:
        report.add("cluster", "warn", f"{want} as declared, not checked: {found.source if found else 'not detected'}")
    elif found.gpus_per_node == 0:
        report.add("cluster", "FAIL", f"{want}: {found.source}")
    elif per > found.gpus_per_node:
        n = found.gpus_per_node
        report.add("cluster", "FAIL", f"{want}, a node has {n} ({found.source}): set trainer.n_gpus_per_node={n} "
                   f"(recipes: N_GPUS_PER_NODE={n})")
    elif found.nodes is None:  # only this machine was seen
        if nnodes == 1:
            report.add("cluster", "ok", f"{want} of {found.gpus_per_node} ({found.source})")
        else:
            report.add("cluster", "warn", f"{want}: {found.source}; the other {nnodes - 1} node(s) are not seen: "
                       "pass --ray-address (or set RAY_ADDRESS) to check them")
    elif nnodes > found.nodes:
        fit = found.nodes
        report.add("cluster", "FAIL", f"{want}, the cluster has {found.total_gpus} ({found.nodes} node(s) x "
                   f"{found.gpus_per_node}; {found.source}): set trainer.nnodes={fit} (recipes: NNODES={fit})")
    else:
        report.add("cluster", "ok", f"{want} of {found.total_gpus} ({found.source})")
    row = f"one GPU: {ctx.gpu_source}"
    if memory_row is not None:
        report.add("GPU memory", memory_row[0], f"{row}: {memory_row[1]}")
    else:
        report.add("GPU memory", "ok", row)


def _loggers(cfg) -> list:
    loggers = _sel(cfg, "trainer.logger") or []
    return [loggers] if isinstance(loggers, str) else list(loggers)


def _wandb_key() -> Optional[str]:
    """Where a wandb key is found on this machine, or None."""
    if os.environ.get("WANDB_API_KEY"):
        return "WANDB_API_KEY"
    if os.environ.get("WANDB_MODE", "").lower() in ("offline", "disabled", "dryrun"):
        return f"WANDB_MODE={os.environ['WANDB_MODE']}"
    try:
        path = os.environ.get("NETRC") or os.path.expanduser("~/.netrc")
        if os.path.isfile(path) and netrc.netrc(path).authenticators("api.wandb.ai"):
            return path
    except (OSError, netrc.NetrcParseError):
        return None
    return None


def check_host(ctx: Context, report: Report) -> None:
    cfg = ctx.cfg
    if "wandb" in _loggers(cfg):
        where = _wandb_key()
        if where is None:
            report.add("logger: wandb", "FAIL", "trainer.logger has wandb and no key is set here (WANDB_API_KEY, "
                       "~/.netrc): verl starts the logger after the workers load, so the run would stop minutes in; "
                       "export WANDB_API_KEY on every node before `ray start`, or drop wandb (recipes: "
                       "LOGGER=[console,file])")
        else:
            report.add("logger: wandb", "ok", f"a key is set here ({where}); every node needs it too")
    _check_shm(ctx, report)
    _check_host_memory(ctx, report)
    _check_validation(ctx, report)


def _check_shm(ctx: Context, report: Report) -> None:
    try:
        st = os.statvfs("/dev/shm")
        size = st.f_blocks * st.f_frsize
    except OSError:
        report.add("/dev/shm", "warn", "/dev/shm not found: NCCL's shared-memory transport and Ray's object store "
                   "use it (containers: --ipc=host or --shm-size=16g)")
        return
    if size >= SHM_MIN:
        report.add("/dev/shm", "ok", f"{_gb(size)} on this machine")
        return
    trains_here = ctx.cluster is not None and ctx.cluster.local_gpus > 0
    report.add("/dev/shm", "FAIL" if trains_here else "warn",
               f"{size / 2**20:,.0f} MB on this machine (Docker's default is 64 MB): NCCL's shared-memory transport "
               "and Ray's object store fail with it; start the container with --ipc=host or --shm-size=16g"
               + ("" if trains_here else " (checked here, not on the nodes)"))


def _check_host_memory(ctx: Context, report: Report) -> None:
    from verl_ebpo.tools.preflight.plan import _backend

    if ctx.params is None or _backend(ctx.cfg) != "fsdp" or not ctx.uses_ref:
        return
    cfg = ctx.cfg
    nnodes = num(cfg, "trainer.nnodes", int, 1)
    per = num(cfg, "trainer.n_gpus_per_node", int, 1)
    ref_dtype = est.dtype_bytes(_sel(cfg, "actor_rollout_ref.ref.fsdp_config.model_dtype"), 4)
    need = est.host_reference_bytes(ctx.params, nnodes * per, per, ref_dtype)
    a = "actor_rollout_ref.actor.fsdp_config"
    offloaded = [n for n, k, b in (("parameters", "param_offload", 4), ("optimizer", "optimizer_offload", 8))
                 if _sel(cfg, f"{a}.{k}")]
    for name in offloaded:
        need += ctx.params * (4 if name == "parameters" else 8) * per // (nnodes * per)
    what = "the reference model's pinned CPU copy (FSDP2 offloads a forward-only model)" + (
        f" + the actor's offloaded {' and '.join(offloaded)}" if offloaded else "")
    host = ctx.cluster.host_bytes if ctx.cluster is not None else None
    if host is None:
        report.add("host memory", "warn", f"{what}: {_gb(need)} a node, not checked (host memory unknown)")
    elif need > 0.9 * host:
        report.add("host memory", "FAIL", f"{what}: {_gb(need)} a node, over 90 % of {_gb(host)} (this machine's, "
                   "or --host-memory-gb): more nodes (trainer.nnodes) shard it thinner")
    else:
        report.add("host memory", "ok", f"{what}: {_gb(need)} a node of {_gb(host)}")


def _rows(path: str) -> Optional[int]:
    try:
        import pyarrow.parquet as pq

        return pq.ParquetFile(path).metadata.num_rows
    except Exception:  # noqa: BLE001 - reported by the data check
        return None


def _check_validation(ctx: Context, report: Report) -> None:
    cfg = ctx.cfg
    before = bool(_sel(cfg, "trainer.val_before_train"))
    freq = num(cfg, "trainer.test_freq", int, none_ok=True) or -1
    if not before and freq <= 0:
        return
    from verl_ebpo.tools.preflight.context import _local, _remote

    rows = 0
    for raw in _files(_sel(cfg, "data.val_files")):
        n = None if _remote(str(raw)) else _rows(_local(str(raw), ctx.working_dir))
        if n is None:
            return
        rows += n
    limit = num(cfg, "data.val_max_samples", int, none_ok=True)
    rows = min(rows, limit) if limit and limit > 0 else rows
    n = num(cfg, "actor_rollout_ref.rollout.val_kwargs.n", int, 1, none_ok=True) or 1
    resp = num(cfg, "data.max_response_length", int, 1)
    gpus = num(cfg, "trainer.nnodes", int, 1) * num(cfg, "trainer.n_gpus_per_node", int, 1)
    tokens = est.validation_tokens(rows, n, resp)
    minutes = tokens / (VAL_TOKENS_PER_S_PER_GPU * gpus) / 60
    when = [w for w, on in (("before the first step (trainer.val_before_train)", before),
                            (f"every {freq} steps (trainer.test_freq)", freq > 0)) if on]
    figure = (f"{rows:,} prompts x {n} samples x up to {resp:,} tokens = {tokens / 1e6:,.1f} M tokens {' and '.join(when)}"
              f": up to ~{minutes:,.0f} min on {gpus} GPUs (estimate at {VAL_TOKENS_PER_S_PER_GPU:,.0f} tokens/s a "
              "GPU), with nothing printed meanwhile")
    report.add("validation", "warn" if minutes >= 5 else "ok", figure)
