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
from typing import Any, Optional

import torch

from verl.plugin.platform import PlatformBase, PlatformRegistry

PLATFORM_NAME = "cpu"

# verl picks the training engine class by (device, vendor); its FSDP engine is registered for
# "cuda"/"npu" only, and runs unchanged on CPU tensors. verl documents this override variable.
ENGINE_DEVICE_ENV = "VERL_ENGINE_DEVICE"


def _rss_bytes() -> int:
    try:
        import psutil

        return int(psutil.Process().memory_info().rss)
    except Exception:  # pragma: no cover - psutil is a Ray dependency
        return 0


def _peak_rss_bytes() -> int:
    # ru_maxrss is KiB on Linux, bytes on macOS.
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if _pyplatform.system() == "Darwin" else peak * 1024)


class CPUDeviceModule:
    """What verl calls on `get_torch_device()` (normally `torch.cuda`), answered for the CPU.

    Attributes not defined here are looked up on `torch.cpu` (Stream, Event, stream, current_stream,
    synchronize, ...). Memory numbers are the process RSS (allocated/reserved) and its peak.
    """

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def current_device() -> torch.device:
        return torch.device("cpu")

    @staticmethod
    def set_device(device: Any) -> None:
        return None

    @staticmethod
    def synchronize(device: Any = None) -> None:
        return None

    @staticmethod
    def empty_cache() -> None:
        return None

    @staticmethod
    def ipc_collect() -> None:
        return None

    @staticmethod
    def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
        return None

    @staticmethod
    def reset_peak_memory_stats(device: Any = None) -> None:
        return None

    @staticmethod
    def mem_get_info(device: Any = None) -> tuple[int, int]:
        try:
            import psutil

            vm = psutil.virtual_memory()
            return int(vm.available), int(vm.total)
        except Exception:  # pragma: no cover
            return 0, 0

    @staticmethod
    def memory_allocated(device: Any = None) -> int:
        return _rss_bytes()

    @staticmethod
    def memory_reserved(device: Any = None) -> int:
        return _rss_bytes()

    @staticmethod
    def max_memory_allocated(device: Any = None) -> int:
        return _peak_rss_bytes()

    @staticmethod
    def max_memory_reserved(device: Any = None) -> int:
        return _peak_rss_bytes()

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

    @staticmethod
    def manual_seed_all(seed: int) -> None:
        torch.manual_seed(seed)


CPU_DEVICE_MODULE = CPUDeviceModule()


class PlatformCPU(PlatformBase):
    """verl platform for a machine without accelerators (select with `VERL_PLATFORM=cpu`)."""

    def __init__(self) -> None:
        # verl instantiates every registered platform to probe it, so act only when this one is selected.
        if os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu":
            os.environ.setdefault(ENGINE_DEVICE_ENV, "cuda")

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self):
        return CPU_DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return False  # never auto-detected: opt in with VERL_PLATFORM=cpu

    def current_device(self) -> torch.device:
        return torch.device("cpu")

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: Optional[int] = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[Optional[int], Optional[int]]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"  # what Ray sets for the logical GPUs; CPU torch ignores it

    @contextlib.contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
        return {"num_gpus": num_gpus}

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def rollout_env_vars(self) -> dict[str, str]:
        return {ENGINE_DEVICE_ENV: os.environ.get(ENGINE_DEVICE_ENV, "cuda")}

    def cudart(self) -> Any:
        return None


def register_platform() -> None:
    """Add `cpu` to verl's platform registry (idempotent; never replaces another `cpu` platform)."""
    existing = PlatformRegistry.get(PLATFORM_NAME)
    if existing is None:
        PlatformRegistry.register(platform=PLATFORM_NAME)(PlatformCPU)
