"""What computed a results file: package versions, CPU, vector code paths, threads (`environment()`).

Every results file a tool writes (`simulate`, `demo`, `compare`) carries this under `"environment"`, because the
last digits of a float depend on it: numpy and ATen pick SIMD kernels for the CPU at run time, and a different
kernel sums in a different order. Measured on the machine that wrote docs/results/ (docs/demo.md#reproducibility):
numpy's dispatch level (AVX-512 `X86_V4` against AVX2 `X86_V3`) and ATen's capability (`AVX512` against `DEFAULT`)
each move simulator values by about 2e-16 relative; the thread count and MKL's settings move none (the simulator
calls no MKL routine). Tests therefore compare re-computed floats with a tolerance (tests/numeric.py).
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys

# the packages whose arithmetic (or sampling) reaches the numbers the tools write
PACKAGES = ("torch", "numpy", "scipy", "mpmath", "pandas", "transformers", "tokenizers", "verl", "ray",
            "verl-ebpo")
# environment variables that change which kernels run or how many threads sum
NUMERIC_ENV = ("ATEN_CPU_CAPABILITY", "NPY_DISABLE_CPU_FEATURES", "NPY_ENABLE_CPU_FEATURES", "MKL_CBWR",
               "MKL_ENABLE_INSTRUCTIONS", "OPENBLAS_CORETYPE", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
# /proc/cpuinfo flags that select a vector code path
VECTOR_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd",
                "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "neon", "asimd",
                "sve")


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cpu() -> tuple[str, list[str]]:
    """(model name, the VECTOR_FLAGS it has) from /proc/cpuinfo; the platform's name where there is none."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and value.strip():
                    model = value.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = set(value.split())
                if key == "" and flags:  # end of the first processor's block
                    break
    except OSError:
        pass
    return model, [f for f in VECTOR_FLAGS if f in flags]


def _numpy_dispatch() -> list[str] | None:
    """The SIMD targets numpy dispatches to on this CPU (its highest is the code path of many loops)."""
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    except ImportError:
        return None
    return [t for t in __cpu_dispatch__ if __cpu_features__.get(t)]


def _torch() -> dict:
    if "torch" not in sys.modules:  # do not import torch just to describe it
        try:
            import torch  # noqa: F401
        except ImportError:
            return {}
    import torch
    return {"cpu_capability": torch.backends.cpu.get_cpu_capability(), "threads": torch.get_num_threads()}


def environment() -> dict:
    """A JSON-ready description of what is computing here: {python, machine, cpu, vector_flags, numpy_dispatch,
    torch_cpu_capability, torch_threads, cpu_count, packages, env}."""
    model, flags = _cpu()
    t = _torch()
    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu": model,
        "vector_flags": flags,
        "numpy_dispatch": _numpy_dispatch(),
        "torch_cpu_capability": t.get("cpu_capability"),
        "torch_threads": t.get("threads"),
        "cpu_count": os.cpu_count(),
        "packages": {name: _version(name) for name in PACKAGES},
        "env": {k: os.environ[k] for k in NUMERIC_ENV if k in os.environ},
    }
