"""Pure prompt orderings (numpy only): a list of labels or difficulties in, a visiting order out.

- `TopicOptions`, `DifficultyOptions`: each ordering's options (`data.ordering.*`, docs/ordering.md), checked on
  construction; a bad value or an unknown key is a one-line ValueError naming `data.ordering.KEY`.
- `topic_order`: one pass; rows grouped by label, clusters one after another, shuffled inside each cluster;
  optionally every cluster aligned to the batch so that no batch mixes two clusters.
- `difficulty_order`: one pass; rows sorted by a numeric difficulty, easy -> hard, ties broken by the seed.
- `plan_epoch`: one epoch as a loader serves it: `passes` passes one after another and, for a loader that drops an
  incomplete last batch (verl's does), that batch completed (`remainder=pad`) or cut (`drop`).

Every function returns an `OrderPlan`. Randomness comes only from `seed` (and `epoch`): each random choice draws
from its own `numpy.random.SeedSequence([seed, purpose, ...])`, so a result is a pure function of its arguments.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from verl_ebpo.samplers.fields import split_path

_P_WITHIN, _P_CLUSTERS, _P_TIES = 1, 2, 3  # purposes of the seed sequences (a stream per choice)
_SHOW = 5  # how many rows an error message lists
_KINDS = {str: "text", int: "integer", float: "float"}


class UnlabelledRowsError(ValueError):
    """Rows without a usable value in the ordering field."""


def from_mapping(cls, mapping: Any, prefix: str, **defaults: Any):
    """`cls(**mapping)` from a dict or DictConfig (None, or a None value: the default), `defaults` below the mapping's
    keys; an unknown key is a ValueError listing the known ones."""
    if mapping is not None and not hasattr(mapping, "items"):
        raise ValueError(f"{prefix} must be a mapping of options, got {type(mapping).__name__}")
    raw, known = dict(mapping.items()) if mapping is not None else {}, [f.name for f in dataclasses.fields(cls)]
    if set(raw) - set(known):
        raise ValueError(f"unknown {prefix} option(s) {sorted(map(str, set(raw) - set(known)))}; known options: {known}")
    return cls(**{**defaults, **{k: v for k, v in raw.items() if v is not None}})


_CHOICES = {"unlabelled": ("error", "drop"), "remainder": ("pad", "drop"), "align": ("none", "drop", "pad")}
_LEAST = {"batch_size": 1, "passes": 1, "seed": 0}  # integers (not bools), at least this


@dataclass(frozen=True)
class OrderingOptions:
    """The options both orderings share (build a `TopicOptions` or `DifficultyOptions`, not this)."""

    field: str = ""  # dotted path of the field the order reads
    unlabelled: str = "error"  # rows with no value in `field`: "error" (count, first rows) or "drop"
    batch_size: int | None = None  # prompts per step, the unit of `align` (default `data.train_batch_size`)
    remainder: str = "pad"  # the loader's incomplete last batch: "pad" (repeat visits complete it) or "drop" (cut)
    passes: int = 1  # passes unrolled into one epoch, each reshuffled (use with trainer.total_epochs=1)
    seed: int = 0  # seeds every shuffle and tie-break (default `data.seed`, else 0)

    def __post_init__(self) -> None:
        for key, value in ((f.name, getattr(self, f.name)) for f in dataclasses.fields(self)):
            if key in _CHOICES and not (isinstance(value, str) and value in _CHOICES[key]):
                raise ValueError(f"data.ordering.{key} must be one of {list(_CHOICES[key])}, got {value!r}")
            least = _LEAST.get(key) if value is not None or key != "batch_size" else None
            if least is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
                what = "a non-negative integer" if least == 0 else "a positive integer"
                raise ValueError(f"data.ordering.{key} must be {what}, got {value!r}")
        try:
            split_path(self.field)
        except ValueError as e:
            raise ValueError(f"data.ordering.field {e}") from None

    @classmethod
    def from_mapping(cls, mapping: Any = None, **defaults: Any):
        return from_mapping(cls, mapping, "data.ordering", **defaults)


@dataclass(frozen=True)
class TopicOptions(OrderingOptions):
    """EBPO-topic: clusters one after another, rows shuffled inside each cluster (`TopicOrderedDataset`)."""

    field: str = "extra_info.topic"  # the cluster label
    # clusters visited "first_seen" (file order), by "name", "random" (seeded, the same every pass) or as listed
    cluster_order: Any = "first_seen"
    align: str = "none"  # "pad" repeats rows of a cluster, "drop" drops its tail: no batch mixes two clusters

    def __post_init__(self) -> None:
        super().__post_init__()
        order = self.cluster_order
        if isinstance(order, Sequence) and not isinstance(order, (str, bytes)):
            names = [str(x) for x in order]
            if len(set(names)) < len(names):
                raise ValueError(f"data.ordering.cluster_order lists a cluster twice "
                                 f"({sorted({n for n in names if names.count(n) > 1})})")
            object.__setattr__(self, "cluster_order", tuple(order))
        elif order not in ("first_seen", "name", "random"):
            raise ValueError(f"data.ordering.cluster_order must be one of ['first_seen', 'name', 'random'] or a list "
                             f"of labels, got {order!r}")


@dataclass(frozen=True)
class DifficultyOptions(OrderingOptions):
    """EBPO-diff: rows sorted easy -> hard, ties broken by the seed (`DifficultyOrderedDataset`)."""

    field: str = "extra_info.difficulty"  # the difficulty, a pass rate by default
    higher_is_easier: bool = True  # a pass rate (1.0 = easy); false for a level (5 = hard)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.higher_is_easier, bool):
            raise ValueError(f"data.ordering.higher_is_easier must be true or false, got {self.higher_is_easier!r}")


OPTIONS = {"topic": TopicOptions, "difficulty": DifficultyOptions}


# ---- the values of an ordering field ---------------------------------------------------------------------------

def is_missing(value: Any) -> bool:
    """None, NaN and empty or blank text: no label (the orderings' and the labelling tools' one rule)."""
    return value is None or (isinstance(value, float) and math.isnan(value)) or (isinstance(value, str)
                                                                                 and not value.strip())


def label_kind(value: Any) -> str | None:
    """"text" | "integer" | "float" for a topic label (numpy scalars as their Python kind), else None."""
    return _KINDS.get(type(value.item() if isinstance(value, np.generic) else value))


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
    """A visiting order over a table's rows. indices: row numbers in visiting order (repeats with align=pad,
    remainder=pad or passes > 1); segments: runs of `indices` sharing a cluster (topic) or the one "scored" group
    (difficulty); dropped: rows never visited; padded / completed: visits added by align=pad / remainder=pad; cut:
    the rows never visited because remainder=drop cut the last incomplete batch."""

    indices: np.ndarray
    segments: tuple[Segment, ...] = ()
    dropped: tuple[int, ...] = ()
    padded: int = 0
    completed: int = 0
    cut: tuple[int, ...] = ()
    num_rows: int = 0
    description: str = ""

    def __len__(self) -> int:
        return int(self.indices.shape[0])

    def fingerprint(self) -> str:
        """Short hash of the visiting order (a resumed run checks it sees the same order)."""
        return hashlib.sha256(self.indices.astype(np.int64).tobytes() + str(self.num_rows).encode()).hexdigest()[:16]

    def summary(self) -> str:
        segments = ", ".join(f"{s.label}({s.size})" for s in self.segments[:12]) + (", ..." * (len(self.segments) > 12))
        left_out = sorted(set(self.dropped) - set(self.cut))
        return "; ".join(part for part, shown in (
            (f"{self.description}: {len(self)} visits over {self.num_rows} rows", True),
            (f"{len(self.segments)} segments: {segments}", self.segments and self.segments[0].label != "scored"),
            (f"{len(left_out)} rows left out by unlabelled=drop / align=drop (first: {left_out[:_SHOW]})", left_out),
            (f"{self.padded} repeat visits added to fill batches (align=pad)", self.padded),
            (f"{self.completed} repeat visits complete the last batch (remainder=pad)", self.completed),
            (f"remainder=drop: the last incomplete batch is cut, {len(self.cut)} rows never served: {list(self.cut)}",
             self.cut)) if shown)


def _rng(seed: int, purpose: int, *more: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(seed), int(purpose), *[int(m) for m in more]]))


def _refuse_missing(opts: OrderingOptions, missing: Sequence[int], n: int, hint: str) -> None:
    if len(missing) and opts.unlabelled == "error":
        raise UnlabelledRowsError(f"{len(missing)} of {n} rows have no value in {opts.field!r} (first row indices: "
                                  f"{list(missing[:_SHOW])}); {hint}, or leave them out with unlabelled=drop")


def topic_order(labels: Sequence[Any], options: TopicOptions | None = None, *, epoch: int = 0,
                **option_values: Any) -> OrderPlan:
    """One pass: clusters one after another, rows shuffled inside each (a new shuffle per `epoch`; cluster order and
    sizes stay). options / option_values: a `TopicOptions` and/or its keys (`passes`, `remainder`: see plan_epoch).
    align "drop" drops each cluster's last size % batch_size rows; "pad" repeats rows of the cluster, from the start
    of its shuffled order, up to a multiple of batch_size."""
    opts = TopicOptions.from_mapping({**(dataclasses.asdict(options) if options else {}), **option_values})
    if opts.align != "none" and opts.batch_size is None:
        raise ValueError(f"align={opts.align!r} needs a positive batch_size, got None")
    members, missing = group_labels(labels, opts.field)
    _refuse_missing(opts, missing, len(labels), "label them (verl-ebpo label-topics)")
    names = list(members)  # first-seen order; a cluster's rank seeds its shuffle
    if isinstance(opts.cluster_order, tuple):
        by_text, wanted = {str(n): n for n in names}, [str(x) for x in opts.cluster_order]
        not_listed = [n for n in names if str(n) not in wanted]
        if not_listed:
            raise ValueError(f"cluster_order lists {len(wanted)} clusters but the data has {len(not_listed)} more: "
                             f"{not_listed[:10]}; list every cluster (labels present: {names[:20]})")
        sequence = [by_text[w] for w in wanted if w in by_text]
    elif opts.cluster_order == "name":
        sequence = sorted(names)  # one kind of label: all text or all numbers
    elif opts.cluster_order == "random":
        sequence = [names[j] for j in _rng(opts.seed, _P_CLUSTERS).permutation(len(names))]
    else:
        sequence = names
    rank = {name: r for r, name in enumerate(names)}
    out, segments, dropped, padded, pos, b = [], [], list(missing), 0, 0, opts.batch_size
    for name in sequence:
        rows = np.asarray(members[name], dtype=np.int64)
        rows = rows[_rng(opts.seed, _P_WITHIN, epoch, rank[name]).permutation(rows.size)]
        if opts.align == "drop":
            dropped += rows[rows.size - rows.size % b:].tolist()
            rows = rows[: rows.size - rows.size % b]
        elif opts.align == "pad" and rows.size % b:
            padded += (-rows.size) % b
            rows = np.resize(rows, rows.size + (-rows.size) % b)  # cycles through the shuffled order
        if rows.size:
            out.append(rows)
            segments.append(Segment(name, pos, pos + rows.size))
            pos += rows.size
    how = opts.cluster_order if isinstance(opts.cluster_order, str) else "listed"
    return OrderPlan(np.concatenate(out) if out else np.zeros(0, dtype=np.int64), tuple(segments),
                     tuple(sorted(dropped)), padded, num_rows=len(labels),
                     description=f"topic order ({how} clusters, seed {opts.seed}, epoch {epoch}, align {opts.align})")


def difficulty_order(values: Sequence[Any], options: DifficultyOptions | None = None, *, epoch: int = 0,
                     **option_values: Any) -> OrderPlan:
    """One pass: rows sorted easy -> hard; equal values in a seeded random order (new per `epoch`).
    options / option_values: a `DifficultyOptions` and/or its keys."""
    opts = DifficultyOptions.from_mapping({**(dataclasses.asdict(options) if options else {}), **option_values})
    v = numeric_values(values, opts.field)
    missing, have = np.flatnonzero(np.isnan(v)), np.flatnonzero(~np.isnan(v))
    _refuse_missing(opts, missing.tolist(), v.size, "score them (verl-ebpo label-difficulty)")
    hardness = -v[have] if opts.higher_is_easier else v[have]  # ascending: easy -> hard
    ties = _rng(opts.seed, _P_TIES, epoch).random(have.size)
    return OrderPlan(have[np.lexsort((ties, hardness))].astype(np.int64),
                     (Segment("scored", 0, have.size),) if have.size else (), tuple(missing.tolist()), num_rows=v.size,
                     description=(f"difficulty order (easy_to_hard, higher value = "
                                  f"{'easier' if opts.higher_is_easier else 'harder'}, seed {opts.seed}, epoch {epoch})"))


def plan_epoch(values: Sequence[Any], options: OrderingOptions, *, epoch: int = 0,
               loader_batch: int | None = None) -> OrderPlan:
    """One epoch: `options.passes` passes (pass p of epoch e ordered as epoch e * passes + p); for a loader that drops
    an incomplete last batch of `loader_batch` (verl's train loader), `options.remainder` completes it with repeat
    visits of the rows just before it in its segment (cycling if the segment is shorter) or cuts it (`plan.cut`)."""
    order = topic_order if isinstance(options, TopicOptions) else difficulty_order
    plan = concat_plans([order(values, options, epoch=epoch * options.passes + p) for p in range(options.passes)])
    return plan if loader_batch is None else _fit_last_batch(plan, options.remainder, int(loader_batch))


def concat_plans(plans: Sequence[OrderPlan]) -> OrderPlan:
    """One plan visiting `plans` one after another (several passes in one epoch)."""
    if len(plans) == 1:
        return plans[0]
    offsets = np.cumsum([0, *map(len, plans)])
    return OrderPlan(np.concatenate([p.indices for p in plans]).astype(np.int64),
                     tuple(Segment(s.label, s.start + o, s.stop + o) for p, o in zip(plans, offsets) for s in p.segments),
                     tuple(sorted(set(plans[0].dropped).intersection(*[set(p.dropped) for p in plans[1:]]))),
                     sum(p.padded for p in plans), num_rows=plans[0].num_rows,
                     description=f"{len(plans)} passes of {plans[0].description}")


def _fit_last_batch(plan: OrderPlan, remainder: str, b: int) -> OrderPlan:
    total = len(plan)
    r = total % b
    if r == 0:
        return plan
    if remainder == "drop":
        if total < b:
            raise ValueError(f"remainder=drop leaves nothing to serve: {total} visits are less than one batch of {b}; "
                             "use remainder=pad or a smaller batch")
        keep = total - r
        never = np.setdiff1d(np.arange(plan.num_rows), plan.indices[:keep])
        return dataclasses.replace(
            plan, indices=plan.indices[:keep], dropped=tuple(never.tolist()),
            segments=tuple(Segment(s.label, s.start, min(s.stop, keep)) for s in plan.segments if s.start < keep),
            cut=tuple(sorted(set(plan.indices[keep:].tolist()) & set(never.tolist()))))
    last = plan.segments[-1]  # a plan with visits has segments
    pool = plan.indices[last.start : total][::-1]  # the segment, latest visit first
    t = min(r, pool.size)  # the incomplete batch's visits inside the segment
    repeats = np.resize(np.concatenate([pool[t:], pool[:t]]), b - r)[::-1]
    return dataclasses.replace(plan, indices=np.concatenate([plan.indices, repeats]), completed=plan.completed + b - r,
                               segments=(*plan.segments[:-1], Segment(last.label, last.start, total + b - r)))
