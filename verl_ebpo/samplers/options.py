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

CLUSTER_ORDERS = ("first_seen", "name", "random", "easy_first", "hard_first")
MAX_BATCH = 1 << 20  # prompts per step; far beyond any real batch, small enough that padding stays cheap
MAX_PASSES = 10_000
MAX_VISITS = 10**8  # visits in one epoch's order (800 MB of int64 indices): checked before they are built
BY_DIFFICULTY = ("easy_first", "hard_first")


def _whole(value: Any, least: int, what: str, most: float = float("inf")) -> int:
    """An exact whole number in [least, most] (an int or its decimal text; never a bool or a float)."""
    ok = isinstance(value, numbers.Integral) or (isinstance(value, str) and value.strip().isdigit())
    if isinstance(value, bool) or not ok or not least <= int(value) <= most:
        raise ValueError(f"must be {what}")
    return int(value)


def _seed(value: Any) -> int:
    return _whole(value, 0, "a non-negative integer")


def _batch_size(value: Any) -> int | None:
    return None if value is None else _whole(value, 1, f"an integer in [1, {MAX_BATCH}]", MAX_BATCH)


def _path(value: Any) -> str:
    split_path(value)  # raises ValueError naming the expected form
    return value


def _cluster_order(value: Any) -> str | tuple:
    if isinstance(value, str):
        if value not in CLUSTER_ORDERS:
            raise ValueError(f"must be one of {list(CLUSTER_ORDERS)} or a list of labels")
        return value
    if isinstance(value, (dict, bytes)) or not hasattr(value, "__iter__"):
        raise ValueError(f"must be one of {list(CLUSTER_ORDERS)} or a list of labels")
    labels = tuple(value)
    names = [str(x) for x in labels]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"lists a cluster twice ({twice})")
    return labels


@dataclass(frozen=True)
class OrderingOptions(Spec):
    """The options both orderings share (build a `TopicOptions` or `DifficultyOptions`, not this)."""

    PREFIX = "data.ordering"
    ORDER: ClassVar[str] = ""

    field: str = option("", check=_path, doc="dotted path of the field the order reads")
    unlabelled: str = option(
        "error",
        choices=("error", "drop", "first", "last"),
        doc="rows with no value in `field`: `error` (count and first row indices), `drop`, or `first` / `last` "
        "(one more group, visited before / after the others)",
    )
    higher_is_easier: bool = option(
        True, doc="the difficulty value is a pass rate (1.0 = easy); `false` for a level (5 = hard)"
    )
    batch_size: int | None = option(
        None,
        check=_batch_size,
        default_doc="`data.train_batch_size`",
        doc=f"in [1, {MAX_BATCH}]: prompts per step: the unit of `align`",
    )
    remainder: str = option(
        "pad",
        choices=("pad", "drop", "error"),
        doc="verl's train loader drops an epoch's last incomplete batch (`drop_last=True`; its batch is "
        "`data.gen_batch_size`, else `data.train_batch_size`), so the last `visits % batch` prompts (the hardest, "
        "in a difficulty order) would never be served. `pad` completes that batch with repeat visits of the rows "
        "just before it in the same cluster / difficulty band (counted in the start-up summary); `drop` leaves "
        "them out and lists at start-up every row never served; `error` stops at start-up",
    )
    passes: int = option(
        1,
        number=(1, MAX_PASSES),
        integer=True,
        doc=f"in [1, {MAX_PASSES}] (and at most 10^8 visits per epoch): N passes unrolled into one epoch, each reshuffled inside clusters (topic) or with new tie-breaks "
        "(difficulty); use with `trainer.total_epochs=1`",
    )
    seed: int = option(
        0, check=_seed, default_doc="`data.seed`, else `0`", doc="seeds every shuffle and tie-break of the order"
    )
    apply_to: str = option(
        "train",
        choices=("train", "all"),
        doc="datasets only: `train` reorders only the dataset built from `data.train_files`; `all` also the "
        "validation set",
    )

    @classmethod
    def build(cls, options: "OrderingOptions | None" = None, **overrides: Any):
        """`options` (or the defaults) with `overrides` applied; a bad or unknown key is a ValueError."""
        if options is None:
            return cls.from_mapping(overrides)
        if not isinstance(options, cls):
            raise ValueError(f"expected {cls.__name__}, got {type(options).__name__}")
        return cls.from_mapping({**options.to_mapping(), **overrides})

    def value_fields(self) -> tuple[str, ...]:
        """The fields the order reads (the first one holds the labels or values)."""
        return (self.field,)


@dataclass(frozen=True)
class TopicOptions(OrderingOptions):
    """EBPO-topic: clusters one after another, rows shuffled inside each cluster (`TopicOrderedDataset`)."""

    ORDER = "topic"

    field: str = option("extra_info.topic", check=_path, doc="dotted path of the cluster label")
    cluster_order: Any = option(
        "first_seen",
        check=_cluster_order,
        doc="order in which clusters are visited: `first_seen` (as they appear in the file), `name`, `random` "
        "(seeded; the same every pass), `easy_first` / `hard_first` (by the cluster's mean of "
        "`difficulty_field`), or a list of every label",
    )
    difficulty_field: str = option(
        "extra_info.difficulty", check=_path, doc="the difficulty read by `easy_first` / `hard_first`"
    )
    align: str = option(
        "none",
        choices=("none", "drop", "pad"),
        doc="`pad` repeats rows of the same cluster, `drop` drops each cluster's tail, so that each cluster's "
        "size is a multiple of `batch_size` and **no batch mixes two clusters** (counted in the start-up summary)",
    )

    def value_fields(self) -> tuple[str, ...]:
        return (self.field, self.difficulty_field) if self.cluster_order in BY_DIFFICULTY else (self.field,)


@dataclass(frozen=True)
class DifficultyOptions(OrderingOptions):
    """EBPO-diff: rows sorted by difficulty, ties broken by the seed (`DifficultyOrderedDataset`)."""

    ORDER = "difficulty"

    field: str = option("extra_info.difficulty", check=_path, doc="dotted path of the difficulty (a pass rate)")
    direction: str = option(
        "easy_to_hard", choices=("easy_to_hard", "hard_to_easy"), doc="`easy_to_hard` (the paper) or `hard_to_easy`"
    )


OPTIONS = {cls.ORDER: cls for cls in (TopicOptions, DifficultyOptions)}


def options_class(order: str) -> type[OrderingOptions]:
    if order not in OPTIONS:
        raise ValueError(f"data.ordering.order must be one of {list(OPTIONS)}, got {order!r}")
    return OPTIONS[order]

