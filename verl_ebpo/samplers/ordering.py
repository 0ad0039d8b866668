"""Pure prompt orderings (numpy only): a list of labels or difficulties in, a visiting order out.

- `TopicOptions`, `DifficultyOptions`: each ordering's options (`data.ordering.*`, docs/ordering.md), checked on
  construction; a bad value or an unknown key is a one-line ValueError naming `data.ordering.KEY`.
- `topic_order`: rows grouped by label, clusters one after another in order of first appearance, shuffled inside.
- `difficulty_order`: rows sorted by a pass rate (higher = easier), easy -> hard, ties broken by the seed.
- `plan_epoch`: one epoch as a loader that drops an incomplete last batch (verl's) serves it: that batch completed.

Every function returns an `OrderPlan`. Randomness comes only from `seed` (and `epoch`): each random choice draws
from its own `numpy.random.SeedSequence([seed, purpose, ...])`, so a result is a pure function of its arguments.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from verl_ebpo.advantage.options import from_mapping
from verl_ebpo.samplers.fields import split_path

_P_WITHIN, _P_TIES = 1, 3  # purposes of the seed sequences (a stream per choice)
_SHOW = 5  # how many rows an error message lists
_KINDS = {str: "text", int: "integer", float: "float"}


class UnlabelledRowsError(ValueError):
    """Rows without a usable value in the ordering field."""


@dataclass(frozen=True)
class OrderingOptions:
    """The options both orderings share (build a `TopicOptions` or `DifficultyOptions`, not this)."""

    field: str = ""  # dotted path of the field the order reads
    unlabelled: str = "error"  # rows with no value in `field`: "error" (count, first rows) or "drop"
    seed: int = 0  # seeds every shuffle and tie-break (default `data.seed`, else 0)

    def __post_init__(self) -> None:
        if self.unlabelled not in ("error", "drop"):
            raise ValueError(f"data.ordering.unlabelled must be one of ['error', 'drop'], got {self.unlabelled!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"data.ordering.seed must be a non-negative integer, got {self.seed!r}")
        try:
            split_path(self.field)
        except ValueError as e:
            raise ValueError(f"data.ordering.field {e}") from None

    from_mapping = classmethod(lambda cls, mapping=None, **defaults: from_mapping(cls, mapping, "data.ordering", **defaults))


@dataclass(frozen=True)
class TopicOptions(OrderingOptions):
    """EBPO-topic: clusters one after another, rows shuffled inside each cluster (`TopicOrderedDataset`)."""

    field: str = "extra_info.topic"  # the cluster label


@dataclass(frozen=True)
class DifficultyOptions(OrderingOptions):
    """EBPO-diff: rows sorted easy -> hard, ties broken by the seed (`DifficultyOrderedDataset`)."""

    field: str = "extra_info.difficulty"  # the difficulty: a pass rate (higher = easier)


OPTIONS = {"topic": TopicOptions, "difficulty": DifficultyOptions}


# ---- the values of an ordering field ---------------------------------------------------------------------------

def is_missing(value: Any) -> bool:
    """None, NaN and empty or blank text: no label (the orderings' and the labelling tools' one rule)."""
    return value is None or (isinstance(value, float) and math.isnan(value)) or (isinstance(value, str)
                                                                                 and not value.strip())


def group_labels(labels: Sequence[Any], field: str) -> tuple[dict[Any, list[int]], list[int]]:
    """Row numbers per label (first-seen order) and the rows without one. A label is text or a number and a field
    holds one kind (1, 1.0, '1' and True never merge): anything else is a ValueError naming the field and a row."""
    members: dict[Any, list[int]] = {}
    missing, first_of = [], {}
    for i, raw in enumerate(labels):
        value = raw.item() if isinstance(raw, np.generic) else raw
        if is_missing(value):
            missing.append(i)
            continue
        if type(value) not in _KINDS:
            raise ValueError(f"row {i}: {field!r} holds {type(raw).__name__} {raw!r:.60}, not a topic label (text or "
                             "a number)")
        first_of.setdefault(_KINDS[type(value)], i)
        members.setdefault(value, []).append(i)
    if len(first_of) > 1:
        raise ValueError(f"{field!r} mixes label kinds: " + ", ".join(f"{k} (first at row {r})" for k, r in first_of.items())
                         + "; 1, 1.0 and '1' would be separate clusters that look alike. Make every label text, or "
                         "every label a number of one type")
    return members, missing


def numeric_values(values: Sequence[Any], field: str) -> np.ndarray:
    """float array with NaN for missing values; a non-numeric or infinite value is a ValueError naming rows."""
    v = [x.item() if isinstance(x, np.generic) else x for x in values]
    bad = [(i, values[i]) for i, x in enumerate(v) if not is_missing(x) and (type(x) not in (int, float) or math.isinf(x))]
    if bad:
        raise ValueError(f"{len(bad)} rows have a non-numeric or infinite value in {field!r} (first (row, value): "
                         f"{bad[:_SHOW]}); the difficulty must be a number such as a pass rate")
    return np.array([np.nan if is_missing(x) else x for x in v], dtype=np.float64)


# ---- plans -----------------------------------------------------------------------------------------------------

class Segment(NamedTuple):
    label: Any
    start: int  # position in OrderPlan.indices
    stop: int


@dataclass(frozen=True)
class OrderPlan:
    """A visiting order over a table's rows. indices: row numbers in visiting order; segments: runs of `indices`
    sharing a cluster (topic) or the one "scored" group (difficulty); dropped: rows never visited (unlabelled=drop);
    completed: repeat visits that complete the loader's last batch (`plan_epoch`)."""

    indices: np.ndarray
    segments: tuple[Segment, ...] = ()
    dropped: tuple[int, ...] = ()
    completed: int = 0
    num_rows: int = 0
    description: str = ""

    def __len__(self) -> int:
        return int(self.indices.shape[0])

    def fingerprint(self) -> str:
        """Short hash of the visiting order (a resumed run checks it sees the same order)."""
        return hashlib.sha256(self.indices.astype(np.int64).tobytes() + str(self.num_rows).encode()).hexdigest()[:16]

    def summary(self) -> str:
        out = f"{self.description}: {len(self)} visits over {self.num_rows} rows"
        if self.segments and self.segments[0].label != "scored":
            out += f"; {len(self.segments)} clusters: " + ", ".join(f"{s.label}({s.stop - s.start})" for s in self.segments[:12])
            out += ", ..." * (len(self.segments) > 12)
        if self.dropped:
            out += f"; {len(self.dropped)} unlabelled rows left out (first: {list(self.dropped[:_SHOW])})"
        return out + (f"; {self.completed} repeat visits complete the last batch" if self.completed else "")


def _rng(seed: int, purpose: int, *more: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(seed), int(purpose), *[int(m) for m in more]]))


def _refuse_missing(opts: OrderingOptions, missing: Sequence[int], n: int, hint: str) -> None:
    if len(missing) and opts.unlabelled == "error":
        raise UnlabelledRowsError(f"{len(missing)} of {n} rows have no value in {opts.field!r} (first row indices: "
                                  f"{list(missing[:_SHOW])}); {hint}, or leave them out with unlabelled=drop")


def topic_order(labels: Sequence[Any], options: TopicOptions | None = None, *, epoch: int = 0,
                **option_values: Any) -> OrderPlan:
    """Clusters one after another in order of first appearance, rows shuffled inside each (a new shuffle per
    `epoch`). options / option_values: a `TopicOptions` and/or its keys."""
    opts = TopicOptions.from_mapping({**dataclasses.asdict(options or TopicOptions()), **option_values})
    members, missing = group_labels(labels, opts.field)
    _refuse_missing(opts, missing, len(labels), "label them (verl-ebpo label-topics)")
    out, segments, pos = [], [], 0
    for rank, (name, rows) in enumerate(members.items()):  # a cluster's rank seeds its shuffle
        rows = np.asarray(rows, dtype=np.int64)
        out.append(rows[_rng(opts.seed, _P_WITHIN, epoch, rank).permutation(rows.size)])
        segments.append(Segment(name, pos, pos + rows.size))
        pos += rows.size
    return OrderPlan(np.concatenate(out) if out else np.zeros(0, dtype=np.int64), tuple(segments), tuple(missing),
                     num_rows=len(labels), description=f"topic order (seed {opts.seed}, epoch {epoch})")


def difficulty_order(values: Sequence[Any], options: DifficultyOptions | None = None, *, epoch: int = 0,
                     **option_values: Any) -> OrderPlan:
    """Rows sorted easy -> hard (a higher value is easier: a pass rate); equal values in a seeded random order (new
    per `epoch`). options / option_values: a `DifficultyOptions` and/or its keys."""
    opts = DifficultyOptions.from_mapping({**dataclasses.asdict(options or DifficultyOptions()), **option_values})
    v = numeric_values(values, opts.field)
    missing, have = np.flatnonzero(np.isnan(v)), np.flatnonzero(~np.isnan(v))
    _refuse_missing(opts, missing.tolist(), v.size, "score them (verl-ebpo label-difficulty)")
    ties = _rng(opts.seed, _P_TIES, epoch).random(have.size)
    return OrderPlan(have[np.lexsort((ties, -v[have]))].astype(np.int64),
                     (Segment("scored", 0, have.size),) if have.size else (), tuple(missing.tolist()), num_rows=v.size,
                     description=f"difficulty order (easy to hard, seed {opts.seed}, epoch {epoch})")


def plan_epoch(values: Sequence[Any], options: OrderingOptions, *, epoch: int = 0,
               loader_batch: int | None = None) -> OrderPlan:
    """One epoch; for a loader that drops an incomplete last batch of `loader_batch` (verl's train loader), that
    batch is completed with repeat visits of the rows just before it in its segment (cycling if the segment is
    shorter), so every row is served."""
    plan = (topic_order if isinstance(options, TopicOptions) else difficulty_order)(values, options, epoch=epoch)
    total = len(plan)
    r = total % loader_batch if loader_batch else 0
    if r == 0:
        return plan
    b, last = int(loader_batch), plan.segments[-1]  # a plan with visits has segments
    pool = plan.indices[last.start:][::-1]  # the segment, latest visit first
    t = min(r, pool.size)  # the incomplete batch's visits inside the segment
    repeats = np.resize(np.concatenate([pool[t:], pool[:t]]), b - r)[::-1]
    return dataclasses.replace(plan, indices=np.concatenate([plan.indices, repeats]), completed=b - r,
                               segments=(*plan.segments[:-1], Segment(last.label, last.start, total + b - r)))
