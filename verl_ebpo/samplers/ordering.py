"""Pure prompt orderings (numpy only): a list of labels or difficulties in, a visiting order out.

- `topic_order`: rows grouped by label, clusters visited one after another, shuffled inside each cluster;
  optional alignment of every cluster to the train batch so that no batch mixes two clusters.
- `difficulty_order`: rows sorted by a numeric difficulty (easy -> hard by default), ties broken by a seed.

Both return an `OrderPlan`. Randomness comes only from `seed` (and `epoch`, for per-epoch reshuffles):
each random choice draws from its own `numpy.random.SeedSequence([seed, purpose, ...])`, so a result is
a pure function of its arguments.
"""

from __future__ import annotations

import hashlib
import math
import numbers
from dataclasses import dataclass
from typing import Any, Hashable, Sequence

import numpy as np

CLUSTER_ORDERS = ("first_seen", "name", "random", "easy_first", "hard_first")
ALIGN_MODES = ("none", "drop", "pad")
UNLABELLED_MODES = ("error", "drop", "first", "last")
DIRECTIONS = ("easy_to_hard", "hard_to_easy")
UNLABELLED = "__unlabelled__"  # segment label of the unlabelled rows (unlabelled=first|last)

# purposes for the seed sequences (distinct streams for distinct choices)
_P_WITHIN, _P_CLUSTERS, _P_TIES, _P_PAD = 1, 2, 3, 4
_SHOW = 5  # how many row indices an error message lists


class UnlabelledRowsError(ValueError):
    """Rows without a usable value in the ordering field."""


@dataclass(frozen=True)
class Segment:
    label: Any
    start: int  # position in OrderPlan.indices
    stop: int

    @property
    def size(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True)
class OrderPlan:
    """A visiting order over the rows of a table.

    indices: row numbers in visiting order (a row appears more than once with align=pad or passes > 1).
    segments: contiguous runs of `indices` that share a cluster (topic) or a group (difficulty).
    dropped: rows never visited (unlabelled=drop, align=drop).
    padded: visits added by align=pad.
    """

    indices: np.ndarray
    segments: tuple[Segment, ...] = ()
    dropped: tuple[int, ...] = ()
    padded: int = 0
    num_rows: int = 0
    description: str = ""

    def __len__(self) -> int:
        return int(self.indices.shape[0])

    def fingerprint(self) -> str:
        """Short hash of the visiting order (to check that a resumed run sees the same order)."""
        h = hashlib.sha256()
        h.update(np.asarray(self.indices, dtype=np.int64).tobytes())
        h.update(str(self.num_rows).encode())
        return h.hexdigest()[:16]

    def summary(self, max_segments: int = 12) -> str:
        parts = [f"{self.description}: {len(self)} visits over {self.num_rows} rows"]
        if len(self.segments) > 1 or (self.segments and self.segments[0].label != "scored"):
            shown = ", ".join(f"{s.label}({s.size})" for s in self.segments[:max_segments])
            more = f", ... {len(self.segments) - max_segments} more" if len(self.segments) > max_segments else ""
            parts.append(f"{len(self.segments)} segments: {shown}{more}")
        if self.dropped:
            parts.append(f"{len(self.dropped)} rows dropped (first: {list(self.dropped[:_SHOW])})")
        if self.padded:
            parts.append(f"{self.padded} repeat visits added to fill batches")
        return "; ".join(parts)


# ------------------------------------------------------------------------------------------------
# helpers


def _rng(seed: int, purpose: int, *more: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(seed), int(purpose), *[int(m) for m in more]]))


def _check_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or int(seed) < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    return int(seed)


def _check_choice(name: str, value: Any, allowed: Sequence[str]) -> str:
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not one of {list(allowed)}")
    return value


def is_missing(value: Any) -> bool:
    """None, NaN and empty strings count as 'no label'."""
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    if isinstance(value, str) and value.strip() == "":
        return True
    return False


def _missing_error(field_name: str, missing: Sequence[int], n: int, hint: str) -> UnlabelledRowsError:
    return UnlabelledRowsError(
        f"{len(missing)} of {n} rows have no value in {field_name!r} "
        f"(first row indices: {list(missing[:_SHOW])}); {hint}"
    )


def _label_key(label: Hashable) -> tuple:
    """Sort key for cluster names: numbers numerically, then strings."""
    if isinstance(label, numbers.Real) and not isinstance(label, bool):
        return (0, float(label), "")
    return (1, 0.0, str(label))


def _hashable(label: Any) -> Hashable:
    if isinstance(label, np.generic):
        label = label.item()
    if isinstance(label, list):
        return tuple(label)
    return label


# ------------------------------------------------------------------------------------------------
# topic


def topic_order(
    labels: Sequence[Any],
    *,
    seed: int = 0,
    epoch: int = 0,
    cluster_order: str | Sequence[Any] = "first_seen",
    difficulties: Sequence[Any] | None = None,
    higher_is_easier: bool = True,
    batch_size: int | None = None,
    align: str = "none",
    unlabelled: str = "error",
    field_name: str = "label",
) -> OrderPlan:
    """Clusters one after another, rows shuffled inside each cluster.

    cluster_order: "first_seen" (as the clusters first appear in the file), "name" (sorted labels),
      "random" (seeded; the same for every epoch), "easy_first"/"hard_first" (by the mean of
      `difficulties` over the cluster's rows; missing values ignored), or an explicit list of labels.
    epoch: changes the shuffle inside clusters only (cluster order and sizes stay the same).
    align: "none"; "drop" (drop each cluster's last size % batch_size rows, so a cluster smaller than a
      batch vanishes); "pad" (repeat rows of the same cluster, from the start of its shuffled order,
      until its size is a multiple of batch_size). With "drop"/"pad" no batch of `batch_size`
      consecutive visits mixes two clusters.
    unlabelled: "error" (default), "drop", or "first"/"last" (the unlabelled rows form one more
      cluster, visited before/after all others).
    """
    seed = _check_seed(seed)
    _check_choice("align", align, ALIGN_MODES)
    _check_choice("unlabelled", unlabelled, UNLABELLED_MODES)
    if isinstance(cluster_order, str):
        _check_choice("cluster_order", cluster_order, CLUSTER_ORDERS)
    if align != "none":
        if batch_size is None or int(batch_size) <= 0:
            raise ValueError(f"align={align!r} needs a positive batch_size, got {batch_size!r}")
        batch_size = int(batch_size)
    n = len(labels)
    if difficulties is not None and len(difficulties) != n:
        raise ValueError(f"difficulties has {len(difficulties)} values for {n} labels")

    # 1. clusters in first-seen order
    members: dict[Hashable, list[int]] = {}
    missing: list[int] = []
    for i, raw in enumerate(labels):
        if is_missing(raw):
            missing.append(i)
            continue
        members.setdefault(_hashable(raw), []).append(i)
    if missing and unlabelled == "error":
        raise _missing_error(
            field_name, missing, n, "label them, or choose where they go with unlabelled=drop|first|last"
        )
    names = list(members)  # first-seen order
    first_seen_rank = {name: r for r, name in enumerate(names)}

    # 2. cluster visiting order
    if not isinstance(cluster_order, str):
        wanted = [str(x) for x in cluster_order]
        by_str: dict[str, Hashable] = {}
        for name in names:
            by_str.setdefault(str(name), name)
        not_listed = [name for name in names if str(name) not in wanted]
        if not_listed:
            raise ValueError(
                f"cluster_order lists {len(wanted)} clusters but the data has {len(not_listed)} more: "
                f"{not_listed[:10]}; list every cluster (labels present: {names[:20]})"
            )
        if len(set(wanted)) != len(wanted):
            raise ValueError(f"cluster_order lists a cluster twice: {wanted}")
        ordered = [by_str[w] for w in wanted if w in by_str]
    elif cluster_order == "first_seen":
        ordered = names
    elif cluster_order == "name":
        ordered = sorted(names, key=_label_key)
    elif cluster_order == "random":
        perm = _rng(seed, _P_CLUSTERS).permutation(len(names))
        ordered = [names[j] for j in perm]
    else:  # easy_first / hard_first
        if difficulties is None:
            raise ValueError(f"cluster_order={cluster_order!r} needs a difficulty value per row")
        values = _numeric_values(difficulties, "difficulty")
        means = {}
        for name in names:
            v = values[members[name]]
            v = v[~np.isnan(v)]
            if v.size == 0:
                raise ValueError(f"cluster {name!r} has no difficulty value, so it cannot be ranked by difficulty")
            means[name] = float(v.mean())
        # easy first: higher pass rate first when higher_is_easier
        easy_key = (lambda m: -m) if higher_is_easier else (lambda m: m)
        sign = 1 if cluster_order == "easy_first" else -1
        ordered = sorted(names, key=lambda nm: (sign * easy_key(means[nm]), first_seen_rank[nm]))

    clusters: list[tuple[Any, list[int], int]] = [(name, members[name], first_seen_rank[name]) for name in ordered]
    if missing and unlabelled in ("first", "last"):
        entry = (UNLABELLED, missing, len(names))
        clusters = [entry, *clusters] if unlabelled == "first" else [*clusters, entry]

    # 3. shuffle inside clusters; align to the batch
    out: list[np.ndarray] = []
    segments: list[Segment] = []
    dropped: list[int] = list(missing) if unlabelled == "drop" else []
    padded = 0
    pos = 0
    for name, rows, rank in clusters:
        rows_arr = np.asarray(rows, dtype=np.int64)
        shuffled = rows_arr[_rng(seed, _P_WITHIN, epoch, rank).permutation(rows_arr.size)]
        if align == "drop":
            keep = (shuffled.size // batch_size) * batch_size
            dropped.extend(int(x) for x in shuffled[keep:])
            shuffled = shuffled[:keep]
        elif align == "pad":
            short = (-shuffled.size) % batch_size
            if short:
                reps = np.resize(shuffled, short)  # cycles through the cluster's shuffled order
                shuffled = np.concatenate([shuffled, reps])
                padded += short
        if shuffled.size == 0:
            continue
        out.append(shuffled)
        segments.append(Segment(name, pos, pos + shuffled.size))
        pos += shuffled.size

    indices = np.concatenate(out) if out else np.zeros(0, dtype=np.int64)
    co = cluster_order if isinstance(cluster_order, str) else "listed"
    return OrderPlan(
        indices=indices,
        segments=tuple(segments),
        dropped=tuple(sorted(dropped)),
        padded=padded,
        num_rows=n,
        description=f"topic order ({co} clusters, seed {seed}, epoch {epoch}, align {align})",
    )


# ------------------------------------------------------------------------------------------------
# difficulty


def _numeric_values(values: Sequence[Any], field_name: str) -> np.ndarray:
    """float array with NaN for missing values; an error names non-numeric values."""
    out = np.empty(len(values), dtype=np.float64)
    bad: list[tuple[int, Any]] = []
    for i, v in enumerate(values):
        if is_missing(v):
            out[i] = np.nan
        elif isinstance(v, bool) or not isinstance(v, (numbers.Real, np.integer, np.floating)):
            bad.append((i, v))
        else:
            f = float(v)
            if math.isinf(f):
                bad.append((i, v))
            out[i] = f
    if bad:
        raise ValueError(
            f"{len(bad)} rows have a non-numeric or infinite value in {field_name!r} "
            f"(first (row, value): {bad[:_SHOW]}); the difficulty must be a number such as a pass rate"
        )
    return out


def difficulty_order(
    values: Sequence[Any],
    *,
    seed: int = 0,
    epoch: int = 0,
    direction: str = "easy_to_hard",
    higher_is_easier: bool = True,
    unlabelled: str = "error",
    field_name: str = "difficulty",
) -> OrderPlan:
    """Rows sorted by difficulty; rows with equal values in a seeded random order (new per `epoch`).

    values: a pass rate by default (higher_is_easier=True: 1.0 = always solved = easy); set
      higher_is_easier=False for a field where a larger number means harder (a level).
    direction: "easy_to_hard" (the paper's curriculum) or "hard_to_easy".
    unlabelled: "error" (default), "drop", or "first"/"last".
    """
    seed = _check_seed(seed)
    _check_choice("direction", direction, DIRECTIONS)
    _check_choice("unlabelled", unlabelled, UNLABELLED_MODES)
    v = _numeric_values(values, field_name)
    n = v.size
    missing = np.flatnonzero(np.isnan(v))
    if missing.size and unlabelled == "error":
        raise _missing_error(
            field_name,
            missing.tolist(),
            n,
            "score them (verl-ebpo label-difficulty), or choose where they go with unlabelled=drop|first|last",
        )
    have = np.flatnonzero(~np.isnan(v))
    easiness = v[have] if higher_is_easier else -v[have]
    primary = -easiness if direction == "easy_to_hard" else easiness  # ascending sort key
    ties = _rng(seed, _P_TIES, epoch).random(have.size)
    sorted_rows = have[np.lexsort((ties, primary))]

    missing_shuffled = missing[_rng(seed, _P_TIES, epoch, 1).permutation(missing.size)]
    segments: list[Segment] = []
    if missing.size and unlabelled == "first":
        parts = [missing_shuffled, sorted_rows]
        segments = [Segment(UNLABELLED, 0, missing.size), Segment("scored", missing.size, n)]
    elif missing.size and unlabelled == "last":
        parts = [sorted_rows, missing_shuffled]
        segments = [Segment("scored", 0, have.size), Segment(UNLABELLED, have.size, n)]
    else:
        parts = [sorted_rows]
        segments = [Segment("scored", 0, have.size)] if have.size else []
    dropped = tuple(missing.tolist()) if unlabelled == "drop" else ()
    return OrderPlan(
        indices=np.concatenate(parts).astype(np.int64),
        segments=tuple(segments),
        dropped=dropped,
        num_rows=n,
        description=(
            f"difficulty order ({direction}, higher value = {'easier' if higher_is_easier else 'harder'}, "
            f"seed {seed}, epoch {epoch})"
        ),
    )


# ------------------------------------------------------------------------------------------------
# several passes in one


def concat_plans(plans: Sequence[OrderPlan], description: str | None = None) -> OrderPlan:
    """One plan that visits `plans` one after another (used to unroll several passes into one epoch)."""
    if not plans:
        raise ValueError("concat_plans needs at least one plan")
    if len(plans) == 1:
        return plans[0]
    segments: list[Segment] = []
    offset = 0
    for p in plans:
        segments.extend(Segment(s.label, s.start + offset, s.stop + offset) for s in p.segments)
        offset += len(p)
    dropped = sorted(set(plans[0].dropped).intersection(*[set(p.dropped) for p in plans[1:]]))
    return OrderPlan(
        indices=np.concatenate([p.indices for p in plans]).astype(np.int64),
        segments=tuple(segments),
        dropped=tuple(dropped),
        padded=sum(p.padded for p in plans),
        num_rows=plans[0].num_rows,
        description=description or f"{len(plans)} passes of {plans[0].description}",
    )
