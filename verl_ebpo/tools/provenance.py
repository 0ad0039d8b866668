"""What computed a results file (`environment()`), kept in every results file a tool writes under "environment".

The last digits of a float depend on the machine (numpy and ATen pick SIMD kernels for the CPU at run time), so
tests compare re-computed floats with a tolerance (tests/numeric.py); this records enough to tell two machines
and two package sets apart: the CPU, ATen's kernel level, the versions and the variables that choose kernels.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform

# the packages whose arithmetic (or sampling) reaches the numbers the tools write
PACKAGES = ("torch", "numpy", "scipy", "mpmath", "pandas", "transformers", "tokenizers", "verl", "ray", "verl-ebpo")
# environment variables that change which kernels run or how many threads sum
NUMERIC_ENV = ("ATEN_CPU_CAPABILITY", "NPY_DISABLE_CPU_FEATURES", "NPY_ENABLE_CPU_FEATURES", "MKL_CBWR",
               "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def environment() -> dict:
    """{python, machine, cpu, torch_cpu_capability, packages, env}, JSON-ready."""
    import torch

    return {"python": platform.python_version(), "machine": platform.machine(),
            "cpu": platform.processor() or platform.machine(),
            "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "packages": {name: _version(name) for name in PACKAGES},
            "env": {k: os.environ[k] for k in NUMERIC_ENV if k in os.environ}}
