"""Comparing numbers that a test re-computes with numbers another machine wrote.

The last bits of a float depend on the SIMD kernels numpy and ATen pick for the CPU (verl_ebpo/tools/provenance.py):
measured here, AVX-512 against AVX2 / DEFAULT kernels move simulator values by up to 2.2e-16 relative; a user's
machine moved one by 3e-16. So a re-computed float matches a committed one within

    REL = 1e-9 (relative) or ABS = 1e-12 (absolute, for values that are differences near zero),

six orders of magnitude above the measured noise and far below any change that matters: an edited number, or a
changed code path (which changes the random draws, so whole results), moves a value by far more. Everything that
is not a float -- verdict labels, counts, keys -- must be equal exactly; a sentence with numbers in it (a verdict)
must have the same words and each number within one unit of the last digit it shows (`text_differences`).
"""

from __future__ import annotations

import math
import re

REL = 1e-9
ABS = 1e-12
IGNORED = ("seconds", "environment")  # wall time, and the description of the machine that computed it


def differences(fresh, committed, path: str = "", ignored=IGNORED) -> list[str]:
    """Where two JSON-like trees differ beyond the tolerance: floats within REL/ABS, everything else exactly.
    Keys in `ignored` are skipped at every depth. Returns readable lines (empty: the same numbers)."""
    if isinstance(fresh, dict) and isinstance(committed, dict):
        out = []
        keys = [k for k in {**committed, **fresh} if k not in ignored]
        for k in keys:
            if k not in fresh or k not in committed:
                out.append(f"{path}/{k}: only in {'the re-run' if k in fresh else 'the committed file'}")
            else:
                out += differences(fresh[k], committed[k], f"{path}/{k}", ignored)
        return out
    if isinstance(fresh, list) and isinstance(committed, list):
        if len(fresh) != len(committed):
            return [f"{path}: {len(fresh)} items against {len(committed)}"]
        return [d for i, (a, b) in enumerate(zip(fresh, committed)) for d in differences(a, b, f"{path}[{i}]", ignored)]
    if isinstance(fresh, float) or isinstance(committed, float):
        if isinstance(fresh, bool) or isinstance(committed, bool) or not isinstance(fresh, (int, float)) \
                or not isinstance(committed, (int, float)):
            return [f"{path}: {fresh!r} against {committed!r}"]
        if math.isnan(fresh) and math.isnan(committed):
            return []
        if math.isclose(fresh, committed, rel_tol=REL, abs_tol=ABS):
            return []
        return [f"{path}: {fresh!r} against {committed!r}"]
    if isinstance(fresh, str) and isinstance(committed, str) and fresh != committed:  # a verdict sentence
        return [f"{path}: {d}" for d in text_differences(fresh, committed)]
    return [] if fresh == committed and type(fresh) is type(committed) else [f"{path}: {fresh!r} against {committed!r}"]


_NUMBER = re.compile(r"[-+]?\d+(?:,\d{3})*(?:\.\d+)?(?:[eE][-+]?\d+)?")


def text_differences(fresh: str, committed: str) -> list[str]:
    """Where two rendered texts differ: the text between numbers exactly, and each number within one unit of the
    last digit it shows (a re-computed 0.1125 may print 0.112 or 0.113 on another machine; 0.115 may not)."""
    a_nums, b_nums = _NUMBER.findall(fresh), _NUMBER.findall(committed)
    if _NUMBER.sub("#", fresh) != _NUMBER.sub("#", committed) or len(a_nums) != len(b_nums):
        a_lines, b_lines = _NUMBER.sub("#", fresh).splitlines(), _NUMBER.sub("#", committed).splitlines()
        first = next((i for i, (x, y) in enumerate(zip(a_lines, b_lines)) if x != y), min(len(a_lines), len(b_lines)))
        return [f"text differs at line {first + 1}"]
    out = []
    for a, b in zip(a_nums, b_nums):
        if a == b:
            continue
        decimals = len(b.split(".")[1].split("e")[0].split("E")[0]) if "." in b else 0
        x, y = float(a.replace(",", "")), float(b.replace(",", ""))
        exponent = int(re.split("[eE]", b)[1]) if re.search("[eE]", b) else 0
        if abs(x - y) > 10.0 ** (exponent - decimals) * (1 + 1e-9):
            out.append(f"{a} against {b}")
    return out
