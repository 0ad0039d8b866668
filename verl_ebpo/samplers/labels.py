"""What counts as a value of an ordering field: the one missing-value rule, topic labels, difficulty numbers.

- Missing (`is_missing`): None, NaN and empty or blank text; every ordering and the labelling tools use it.
- A topic label is text or a number, and one field holds one kind: all text, all integers or all floats
  (numpy scalars count as their Python kind). A bool, a list, a struct (dict) or any other value is refused
  naming the field and the row; so is a mix of kinds (`1`, `1.0`, `"1"` and `True` are never merged, so two
  rows can never share a cluster by accident nor one cluster vanish from a listed `cluster_order`).
- A difficulty is a finite number (not a bool); missing values are NaN.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Hashable, Sequence

import numpy as np

_SHOW = 5  # how many rows an error message lists
_KINDS = {str: "text", int: "integer", float: "float"}


def is_missing(value: Any) -> bool:
    """None, NaN and empty strings count as 'no label'."""
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    if isinstance(value, str) and value.strip() == "":
        return True
    return False


def label_kind(value: Any) -> str | None:
    """"text" | "integer" | "float" for a usable topic label (a present value; numpy scalars as their Python kind),
    None for anything else (a bool, a list, a struct)."""
    return _KINDS.get(type(value.item() if isinstance(value, np.generic) else value))


def group_labels(labels: Sequence[Any], field: str) -> tuple[dict[Hashable, list[int]], list[int]]:
    """Row numbers per label (labels in first-seen order, as Python str/int/float), and the rows without one.

    ValueError naming `field` and a row: a value that is not a label (a bool, a list, a struct), or labels of
    more than one kind."""
    members: dict[Hashable, list[int]] = {}
    missing: list[int] = []
    first_of: dict[str, int] = {}
    for i, raw in enumerate(labels):
        value = raw.item() if isinstance(raw, np.generic) else raw
        if is_missing(value):
            missing.append(i)
        elif _KINDS.get(type(value)) is None:
            raise ValueError(f"row {i}: {field!r} holds {type(raw).__name__} {raw!r:.60}, not a topic label; a label "
                             "is text or a number")
        else:
            first_of.setdefault(_KINDS[type(value)], i)
            members.setdefault(value, []).append(i)
    if len(first_of) > 1:
        kinds = ", ".join(f"{k} (first at row {r})" for k, r in first_of.items())
        raise ValueError(
            f"{field!r} mixes label kinds: {kinds}; 1, 1.0 and '1' would be separate clusters that look alike. "
            "Make every label text, or every label a number of one type"
        )
    return members, missing


def label_sort_key(label: Hashable) -> tuple:
    """Sort key for cluster names: numbers numerically, then strings."""
    if isinstance(label, numbers.Real) and not isinstance(label, bool):
        return (0, float(label), "")
    return (1, 0.0, str(label))


def numeric_values(values: Sequence[Any], field_name: str) -> np.ndarray:
    """float array with NaN for missing values; an error names non-numeric or infinite values."""
    if set(map(type, values)) <= {float, int}:  # the common case, converted at C speed
        out = np.array(values, dtype=np.float64)
        if not np.isinf(out).any():
            return out
    out = np.full(len(values), np.nan)
    bad: list[tuple[int, Any]] = []
    for i, raw in enumerate(values):
        v = raw.item() if isinstance(raw, np.generic) else raw
        if type(v) not in (int, float) or math.isinf(v):
            if not is_missing(v):
                bad.append((i, raw))
        else:
            out[i] = v
    if bad:
        raise ValueError(
            f"{len(bad)} rows have a non-numeric or infinite value in {field_name!r} "
            f"(first (row, value): {bad[:_SHOW]}); the difficulty must be a number such as a pass rate"
        )
    return out
