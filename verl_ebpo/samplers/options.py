"""The ordering options: one frozen, self-validating spec per ordering (`verl_ebpo.spec`).

`TopicOptions` (EBPO-topic) and `DifficultyOptions` (EBPO-diff) are the one definition of every ordering
option. The pure orderings (`topic_order`, `difficulty_order`, `plan_epoch`), the torch samplers, the verl
dataset classes (`data.ordering.*`) and `overrides()` all take one of them or build one from keyword
arguments; docs/ordering.md shows their `markdown_table()`. Numpy-free and torch-free (stdlib only).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, ClassVar

from verl_ebpo.samplers.fields import split_path
from verl_ebpo.spec import Spec, option

CLUSTER_ORDERS = ("first_seen", "name", "random")
MAX_BATCH = 1 << 20  # prompts per step; far beyond any real batch, small enough that padding stays cheap
MAX_PASSES = 10_000
MAX_VISITS = 10**8  # visits in one epoch's order (800 MB of int64 indices): checked before they are built


def _whole(value: Any, least: int, what: str, most: float = float("inf")) -> int:
    """An exact whole number in [least, most] (an int or its decimal text; never a bool or a float)."""
    ok = isinstance(value, numbers.Integral) or (isinstance(value, str) and value.strip().isdigit())
    if isinstance(value, bool) or not ok or not least <= int(value) <= most:
        raise ValueError(f"must be {what}")
    return int(value)


def _batch_size(value: Any) -> int | None:
    return None if value is None else _whole(value, 1, f"an integer in [1, {MAX_BATCH}]", MAX_BATCH)


def _path(value: Any) -> str:
    split_path(value)  # raises ValueError naming the expected form
    return value


def _cluster_order(value: Any) -> str | tuple:
    if isinstance(value, str) and value in CLUSTER_ORDERS:
        return value
    if isinstance(value, (str, dict, bytes)) or not hasattr(value, "__iter__"):
        raise ValueError(f"must be one of {list(CLUSTER_ORDERS)} or a list of labels")
    names = [str(x) for x in value]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"lists a cluster twice ({twice})")
    return tuple(value)


@dataclass(frozen=True)
class OrderingOptions(Spec):
    """The options both orderings share (build a `TopicOptions` or `DifficultyOptions`, not this)."""

    PREFIX = "data.ordering"
    ORDER: ClassVar[str] = ""

    field: str = option("", check=_path, doc="dotted path of the field the order reads")
    unlabelled: str = option("error", choices=("error", "drop"),
                             doc="rows with no value in `field`: `error` (count and first row indices) or `drop`")
    batch_size: int | None = option(None, check=_batch_size, default_doc="`data.train_batch_size`",
                                    doc=f"in [1, {MAX_BATCH}]: prompts per step: the unit of `align`")
    remainder: str = option("pad", choices=("pad", "drop"), doc=(
        "verl's train loader drops an epoch's last incomplete batch (`drop_last=True`; its batch is "
        "`data.gen_batch_size`, else `data.train_batch_size`), so the last `visits % batch` prompts (the hardest, "
        "in a difficulty order) would never be served. `pad` completes that batch with repeat visits of the rows "
        "just before it in the same cluster / difficulty band (counted in the start-up summary); `drop` leaves "
        "them out and lists at start-up every row never served"))
    passes: int = option(1, number=(1, MAX_PASSES), integer=True, doc=(
        f"in [1, {MAX_PASSES}] (and at most 10^8 visits per epoch): N passes unrolled into one epoch, each reshuffled "
        "inside clusters (topic) or with new tie-breaks (difficulty); use with `trainer.total_epochs=1`"))
    seed: int = option(0, check=lambda v: _whole(v, 0, "a non-negative integer"), default_doc="`data.seed`, else `0`",
                       doc="seeds every shuffle and tie-break of the order")

    @classmethod
    def build(cls, options: "OrderingOptions | None" = None, **overrides: Any):
        """`options` (or the defaults) with `overrides` applied; a bad or unknown key is a ValueError."""
        if options is not None and not isinstance(options, cls):
            raise ValueError(f"expected {cls.__name__}, got {type(options).__name__}")
        return cls.from_mapping({**(options.to_mapping() if options is not None else {}), **overrides})


@dataclass(frozen=True)
class TopicOptions(OrderingOptions):
    """EBPO-topic: clusters one after another, rows shuffled inside each cluster (`TopicOrderedDataset`)."""

    ORDER = "topic"

    field: str = option("extra_info.topic", check=_path, doc="dotted path of the cluster label")
    cluster_order: Any = option("first_seen", check=_cluster_order, doc=(
        "order in which clusters are visited: `first_seen` (as they appear in the file), `name`, `random` "
        "(seeded; the same every pass), or a list of every label"))
    align: str = option("none", choices=("none", "drop", "pad"), doc=(
        "`pad` repeats rows of the same cluster, `drop` drops each cluster's tail, so that each cluster's "
        "size is a multiple of `batch_size` and **no batch mixes two clusters** (counted in the start-up summary)"))


@dataclass(frozen=True)
class DifficultyOptions(OrderingOptions):
    """EBPO-diff: rows sorted easy -> hard (the paper's curriculum), ties broken by the seed
    (`DifficultyOrderedDataset`)."""

    ORDER = "difficulty"

    field: str = option("extra_info.difficulty", check=_path, doc="dotted path of the difficulty (a pass rate)")
    higher_is_easier: bool = option(True, doc="the difficulty value is a pass rate (1.0 = easy); `false` for a level "
                                    "(5 = hard)")


OPTIONS = {cls.ORDER: cls for cls in (TopicOptions, DifficultyOptions)}

