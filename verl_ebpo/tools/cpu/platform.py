"""A `cpu` platform for verl's platform registry (`verl.plugin.platform.PlatformRegistry`).

Selected only by `VERL_PLATFORM=cpu`: `is_platform_available()` is always False, so verl's
auto-detection never picks it on a machine with accelerators.

What it provides (each item is where stock verl 0.9.1 fails on a CPU-only machine):
- device module: `torch.cpu` plus stand-ins for what verl calls on `torch.cuda` (empty_cache,
  mem_get_info, memory statistics, RNG state, ...), see `CPUDeviceModule`;
- collective backend `gloo`; device id `torch.device("cpu")` (an integer would mean accelerator 0);
- Ray resource name "GPU": verl's resource pools always ask Ray for accelerators, so a CPU run gives
  Ray logical GPUs (`+ray_kwargs.ray_init.num_gpus=1`); nothing ever touches a real GPU.
"""

from __future__ import annotations

import contextlib
import os
import platform as _pyplatform
import resource
import sys
from typing import Any, Optional

import psutil  # a Ray dependency
import torch

from verl.plugin.platform import PlatformBase, PlatformRegistry

PLATFORM_NAME = "cpu"

# verl picks the training engine class by (device, vendor); its FSDP engine is registered for
# "cuda"/"npu" only, and runs unchanged on CPU tensors. verl documents this override variable.
ENGINE_DEVICE_ENV = "VERL_ENGINE_DEVICE"


def _nothing(*args, **kwargs) -> None:
    return None


def _rss_bytes(device: Any = None) -> int:
    return int(psutil.Process().memory_info().rss)


def _peak_rss_bytes(device: Any = None) -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return int(peak if sys.platform == "darwin" else peak * 1024)


class CPUDeviceModule:
    """What verl calls on `get_torch_device()` (normally `torch.cuda`), answered for the CPU.

    Attributes not defined here are looked up on `torch.cpu` (is_available, device_count, synchronize, set_device,
    Stream, Event, ...). Memory numbers are the process RSS (allocated/reserved) and its peak.
    """

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)

    empty_cache = ipc_collect = set_per_process_memory_fraction = reset_peak_memory_stats = staticmethod(_nothing)
    memory_allocated = memory_reserved = staticmethod(_rss_bytes)
    max_memory_allocated = max_memory_reserved = staticmethod(_peak_rss_bytes)

    @staticmethod
    def current_device() -> torch.device:
        return torch.device("cpu")  # torch.cpu's is the string "cpu"

    @staticmethod
    def mem_get_info(device: Any = None) -> tuple[int, int]:
        vm = psutil.virtual_memory()
        return int(vm.available), int(vm.total)

    @staticmethod
    def memory_stats(device: Any = None) -> dict:
        return {}

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        return _pyplatform.processor() or "cpu"

    @staticmethod
    def get_rng_state(device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state: torch.Tensor, device: Any = None) -> None:
        torch.set_rng_state(state)

    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed


CPU_DEVICE_MODULE = CPUDeviceModule()


class PlatformCPU(PlatformBase):
    """verl platform for a machine without accelerators (select with `VERL_PLATFORM=cpu`)."""

    device_name = vendor_name = "cpu"
    device_module = CPU_DEVICE_MODULE
    set_device = synchronize = set_allocator_settings = empty_cache = profiler_start = profiler_stop = cudart = _nothing

    def __init__(self) -> None:
        # verl instantiates every registered platform to probe it, so act only when this one is selected.
        if os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu":
            os.environ.setdefault(ENGINE_DEVICE_ENV, "cuda")

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return False  # never auto-detected: opt in with VERL_PLATFORM=cpu

    def current_device(self) -> torch.device:
        return torch.device("cpu")  # an integer would mean accelerator 0

    def device_count(self) -> int:
        return 1

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed

    def get_device_capability(self, device_index: int = 0) -> tuple[Optional[int], Optional[int]]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"  # what Ray sets for the logical GPUs; CPU torch ignores it

    @contextlib.contextmanager
    def nvtx_range(self, msg: str):
        yield

    def ray_resource_name(self) -> str:
        return "GPU"  # so verl's own ray_resource_options asks Ray for {"num_gpus": n}, logical GPUs

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def rollout_env_vars(self) -> dict[str, str]:
        return {ENGINE_DEVICE_ENV: os.environ.get(ENGINE_DEVICE_ENV, "cuda")}


def register_platform() -> None:
    """Add `cpu` to verl's platform registry (idempotent; never replaces another `cpu` platform)."""
    if PlatformRegistry.get(PLATFORM_NAME) is None:
        PlatformRegistry.register(platform=PLATFORM_NAME)(PlatformCPU)
