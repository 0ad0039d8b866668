"""What computed a results file (`environment()`), kept in every results file a tool writes under "environment":
the Python, the machine, the versions of the packages whose arithmetic reaches the numbers, and the variables that
choose kernels or thread counts (the last digits of a float move with them; tests/numeric.py compares with a
tolerance)."""

from __future__ import annotations

import importlib.metadata
import os
import platform

PACKAGES = ("torch", "numpy", "scipy", "mpmath", "pandas", "transformers", "tokenizers", "verl", "ray", "verl-ebpo")
NUMERIC_ENV = ("ATEN_CPU_CAPABILITY", "NPY_DISABLE_CPU_FEATURES", "NPY_ENABLE_CPU_FEATURES", "MKL_CBWR",
               "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def version(name: str) -> str | None:
    """The installed version of distribution `name`, or None."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def environment() -> dict:
    """{python, machine, packages, env}, JSON-ready."""
    return {"python": platform.python_version(), "machine": platform.machine(),
            "packages": {name: version(name) for name in PACKAGES},
            "env": {k: os.environ[k] for k in NUMERIC_ENV if k in os.environ}}
