"""Pure prompt orderings (numpy only): a list of labels or difficulties in, a visiting order out.

- `topic_order`: one pass; rows grouped by label, clusters visited one after another, shuffled inside each
  cluster; optionally every cluster aligned to the batch so that no batch mixes two clusters.
- `difficulty_order`: one pass; rows sorted by a numeric difficulty, easy -> hard, ties broken by the seed.
- `plan_epoch`: one epoch as a loader serves it: `passes` passes one after another and, for a loader that
  drops an incomplete last batch (verl's does), that batch handled as `remainder` says.

The options are one spec per ordering (`TopicOptions`, `DifficultyOptions` in `verl_ebpo.samplers.options`):
pass one, or its keys as keyword arguments (`topic_order(labels, seed=1, align="pad", batch_size=8)`).
Every function returns an `OrderPlan`. Randomness comes only from `seed` (and `epoch`, for per-epoch
reshuffles): each random choice draws from its own `numpy.random.SeedSequence([seed, purpose, ...])`, so a
result is a pure function of its arguments.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from typing import Any, Hashable, Sequence

import numpy as np

from verl_ebpo.samplers.labels import group_labels, label_sort_key, numeric_values
from verl_ebpo.samplers.options import MAX_BATCH, MAX_VISITS, DifficultyOptions, OrderingOptions, TopicOptions

# purposes for the seed sequences (distinct streams for distinct choices)
_P_WITHIN, _P_CLUSTERS, _P_TIES = 1, 2, 3
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

    indices: row numbers in visiting order (a row appears more than once with align=pad, remainder=pad or
      passes > 1).
    segments: contiguous runs of `indices` that share a cluster (topic) or a group (difficulty).
    dropped: rows never visited (unlabelled=drop, align=drop, remainder=drop).
    padded: visits added by align=pad. completed: visits added by remainder=pad.
    cut: rows never visited because remainder=drop cut the last incomplete batch (all of them, sorted).
    """

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
        left_out = sorted(set(self.dropped) - set(self.cut))
        if left_out:
            parts.append(f"{len(left_out)} rows left out by unlabelled=drop / align=drop (first: {left_out[:_SHOW]})")
        if self.padded:
            parts.append(f"{self.padded} repeat visits added to fill batches (align=pad)")
        if self.completed:
            parts.append(f"{self.completed} repeat visits complete the last batch (remainder=pad)")
        if self.cut:
            parts.append(f"remainder=drop: the last incomplete batch is cut, {len(self.cut)} rows never served: "
                         f"{list(self.cut)}")
        return "; ".join(parts)


def _rng(seed: int, purpose: int, *more: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(seed), int(purpose), *[int(m) for m in more]]))


def _refuse_missing(opts: OrderingOptions, missing: Sequence[int], n: int, hint: str) -> None:
    if len(missing) and opts.unlabelled == "error":
        raise UnlabelledRowsError(f"{len(missing)} of {n} rows have no value in {opts.field!r} (first row indices: "
                                  f"{list(missing[:_SHOW])}); {hint}, or leave them out with unlabelled=drop")


# ------------------------------------------------------------------------------------------------
# topic: group -> order the clusters -> shuffle (and align) inside each


def topic_order(labels: Sequence[Any], options: TopicOptions | None = None, *, epoch: int = 0,
                **option_values: Any) -> OrderPlan:
    """One pass: clusters one after another, rows shuffled inside each cluster.

    options / option_values: a `TopicOptions` and/or its keys (seed, cluster_order, align, batch_size,
      unlabelled, field: the name used in messages). One pass ignores `passes` and `remainder` (see `plan_epoch`).
    epoch: changes the shuffle inside clusters only (cluster order and sizes stay the same).
    align "drop" drops each cluster's last size % batch_size rows (a cluster smaller than a batch vanishes);
    "pad" repeats rows of the same cluster, from the start of its shuffled order, until its size is a
    multiple of batch_size.
    """
    opts = TopicOptions.build(options, **option_values)
    if opts.align != "none" and opts.batch_size is None:
        raise ValueError(f"align={opts.align!r} needs a positive batch_size, got None")
    members, missing = group_labels(labels, opts.field)  # one kind of label, refused naming field and row
    _refuse_missing(opts, missing, len(labels), "label them")
    names = list(members)  # first-seen order
    rank = {name: r for r, name in enumerate(names)}  # seeds each cluster's shuffle
    groups = [(name, members[name], rank[name]) for name in _cluster_sequence(names, opts)]
    if opts.align == "pad":
        _check_visits(sum(-(-len(rows) // opts.batch_size) * opts.batch_size for _, rows, _ in groups), "align=pad")
    plan = _shuffle_and_align(groups, opts, epoch, len(labels))
    return dataclasses.replace(plan, dropped=tuple(sorted([*plan.dropped, *missing])))


def _cluster_sequence(names: list, opts: TopicOptions) -> list:
    """The clusters in visiting order (`names` is first-seen order)."""
    order = opts.cluster_order
    if isinstance(order, tuple):
        return _listed(names, order)
    if order == "first_seen":
        return names
    if order == "name":
        return sorted(names, key=label_sort_key)
    return [names[j] for j in _rng(opts.seed, _P_CLUSTERS).permutation(len(names))]  # random


def _listed(names: list, wanted_labels: tuple) -> list:
    """The order the user listed; labels match by their text (Hydra may hand numbers over as strings)."""
    wanted = [str(x) for x in wanted_labels]
    by_str = {str(name): name for name in names}  # one kind of label: no two share a text
    not_listed = [name for name in names if str(name) not in wanted]
    if not_listed:
        raise ValueError(f"cluster_order lists {len(wanted)} clusters but the data has {len(not_listed)} more: "
                         f"{not_listed[:10]}; list every cluster (labels present: {names[:20]})")
    return [by_str[w] for w in wanted if w in by_str]


def _shuffle_and_align(groups: list, opts: TopicOptions, epoch: int, n: int) -> OrderPlan:
    """Each group's rows shuffled (its own stream: independent of the cluster order), then aligned."""
    out, segments, dropped, padded, pos, b = [], [], [], 0, 0, opts.batch_size
    for name, rows, rank in groups:
        rows_arr = np.asarray(rows, dtype=np.int64)
        shuffled = rows_arr[_rng(opts.seed, _P_WITHIN, epoch, rank).permutation(rows_arr.size)]
        if opts.align == "drop":
            keep = (shuffled.size // b) * b
            dropped.extend(shuffled[keep:].tolist())
            shuffled = shuffled[:keep]
        elif opts.align == "pad" and shuffled.size % b:
            short = (-shuffled.size) % b
            shuffled = np.concatenate([shuffled, np.resize(shuffled, short)])  # cycles through the shuffled order
            padded += short
        if shuffled.size:
            out.append(shuffled)
            segments.append(Segment(name, pos, pos + shuffled.size))
            pos += shuffled.size
    co = opts.cluster_order if isinstance(opts.cluster_order, str) else "listed"
    return OrderPlan(np.concatenate(out) if out else np.zeros(0, dtype=np.int64), tuple(segments),
                     tuple(sorted(dropped)), padded, num_rows=n,
                     description=f"topic order ({co} clusters, seed {opts.seed}, epoch {epoch}, align {opts.align})")


# ------------------------------------------------------------------------------------------------
# difficulty


def difficulty_order(values: Sequence[Any], options: DifficultyOptions | None = None, *, epoch: int = 0,
                     **option_values: Any) -> OrderPlan:
    """One pass: rows sorted easy -> hard; rows with equal values in a seeded random order (new per `epoch`).

    options / option_values: a `DifficultyOptions` and/or its keys (seed, higher_is_easier, unlabelled,
      field: the name used in messages). values: a pass rate by default (higher_is_easier: 1.0 = always solved
      = easy); higher_is_easier=False for a field where a larger number means harder.
    """
    opts = DifficultyOptions.build(options, **option_values)
    v = numeric_values(values, opts.field)
    missing, have = np.flatnonzero(np.isnan(v)), np.flatnonzero(~np.isnan(v))
    _refuse_missing(opts, missing.tolist(), v.size, "score them (verl-ebpo label-difficulty)")
    hardness = -v[have] if opts.higher_is_easier else v[have]  # ascending sort key: easy -> hard
    ties = _rng(opts.seed, _P_TIES, epoch).random(have.size)
    return OrderPlan(
        indices=have[np.lexsort((ties, hardness))].astype(np.int64),
        segments=(Segment("scored", 0, have.size),) if have.size else (),
        dropped=tuple(missing.tolist()),
        num_rows=v.size,
        description=(f"difficulty order (easy_to_hard, higher value = "
                     f"{'easier' if opts.higher_is_easier else 'harder'}, seed {opts.seed}, epoch {epoch})"),
    )


# ------------------------------------------------------------------------------------------------
# one epoch: passes, then the last batch


def plan_epoch(values: Sequence[Any], options: OrderingOptions, *, epoch: int = 0,
               loader_batch: int | None = None) -> OrderPlan:
    """One epoch as a loader serves it.

    `options.passes` passes one after another (pass p of epoch e is ordered as epoch e * passes + p).
    loader_batch: the batch size of a loader that drops an incomplete last batch (verl's train loader does;
      None: a loader that serves it). `options.remainder` then decides: `pad` completes it with repeat
      visits of the rows just before it in its segment (cycling through the segment if it is shorter than
      the batch), `drop` cuts it and lists the rows never served (`OrderPlan.cut`).
    """
    order = topic_order if isinstance(options, TopicOptions) else difficulty_order
    one = lambda p: order(values, options, epoch=p)  # noqa: E731  (a DifficultyOptions is checked by build)
    first = one(epoch * options.passes)
    _check_visits(len(first) * options.passes, f"passes={options.passes}")
    plan = concat_plans([first, *(one(epoch * options.passes + p) for p in range(1, options.passes))])
    return plan if loader_batch is None else _fit_last_batch(plan, options.remainder, int(loader_batch))


def _check_visits(visits: int, why: str) -> None:
    """Refuse, before building it, an epoch of more than MAX_VISITS visits (memory: 8 bytes each)."""
    if visits > MAX_VISITS:
        raise ValueError(f"{why} makes {visits:,} visits in one epoch, more than the {MAX_VISITS:,} allowed "
                         f"({visits * 8 / 2**30:.1f} GiB of indices); use fewer passes or a smaller batch_size")


def concat_plans(plans: Sequence[OrderPlan]) -> OrderPlan:
    """One plan that visits `plans` one after another (used to unroll several passes into one epoch)."""
    if len(plans) == 1:
        return plans[0]
    offsets = np.cumsum([0, *map(len, plans)])
    return OrderPlan(
        indices=np.concatenate([p.indices for p in plans]).astype(np.int64),
        segments=tuple(Segment(s.label, s.start + o, s.stop + o) for p, o in zip(plans, offsets) for s in p.segments),
        dropped=tuple(sorted(set(plans[0].dropped).intersection(*[set(p.dropped) for p in plans[1:]]))),
        padded=sum(p.padded for p in plans),
        num_rows=plans[0].num_rows,
        description=f"{len(plans)} passes of {plans[0].description}",
    )


def _fit_last_batch(plan: OrderPlan, remainder: str, b: int) -> OrderPlan:
    """The plan with its last incomplete batch of `b` completed (pad) or cut (drop)."""
    if not 1 <= b <= MAX_BATCH:
        raise ValueError(f"the loader's batch size must be an integer in [1, {MAX_BATCH}], got {b}")
    total = len(plan)
    r = total % b
    if r == 0:
        return plan
    tail_rows = sorted(set(plan.indices[total - r :].tolist()))
    if remainder == "drop":
        if total < b:
            raise ValueError(f"remainder=drop leaves nothing to serve: {total} visits are less than one batch of {b}; "
                             "use remainder=pad or a smaller batch")
        keep = total - r
        indices = plan.indices[:keep]
        segments = tuple(Segment(s.label, s.start, min(s.stop, keep)) for s in plan.segments if s.start < keep)
        never = np.setdiff1d(np.arange(plan.num_rows), indices)
        return dataclasses.replace(plan, indices=indices, segments=segments, dropped=tuple(never.tolist()),
                                   cut=tuple(sorted(set(tail_rows).intersection(never.tolist()))))
    last = plan.segments[-1] if plan.segments else Segment(None, 0, total)
    pool = plan.indices[last.start : total][::-1]  # the segment, latest visit first
    t = min(r, pool.size)  # the incomplete batch's visits inside the segment
    repeats = np.resize(np.concatenate([pool[t:], pool[:t]]), b - r)[::-1]
    return dataclasses.replace(plan, indices=np.concatenate([plan.indices, repeats]),
                               segments=(*plan.segments[:-1], Segment(last.label, last.start, total + b - r)),
                               completed=plan.completed + b - r)
