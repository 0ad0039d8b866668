"""verl dataset classes that put their rows in topic or difficulty order (the stock-trainer route).

verl 0.9.1 builds the train dataset from `data.custom_cls.{path,name}` and, with `data.shuffle=False`,
reads it through a SequentialSampler in a torchdata StatefulDataLoader. These subclasses of verl's
`RLHFDataset` reorder their rows once, right after verl has read (and length-filtered) the files, so the
stock loader visits them in that order. The order is a pure function of the file and `data.ordering.*`,
so a resumed run (verl's `data.pt`) rebuilds the same order and the loader continues after the last
prompt it served. Each dataset also saves a fingerprint of its order in `data.pt` and refuses to resume
over a different order.

    data.shuffle=False
    data.custom_cls.path=pkg://verl_ebpo.samplers.dataset
    data.custom_cls.name=TopicOrderedDataset        # or DifficultyOrderedDataset
    ++data.ordering.<option>=<value>                 # optional, see OrderingOptions

Only the train dataset is reordered (the one whose files are `data.train_files`); the validation
dataset, built from the same class, keeps verl's behaviour unless `data.ordering.apply_to=all`.
Across epochs the order is the same (a SequentialSampler); `data.ordering.passes=N` unrolls N passes
into one epoch, each reshuffled inside clusters (use it with `trainer.total_epochs=1`).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, fields
from typing import Any

from verl.utils.dataset.rl_dataset import RLHFDataset

from verl_ebpo.samplers.fields import read_field
from verl_ebpo.samplers.ordering import (
    ALIGN_MODES,
    CLUSTER_ORDERS,
    DIRECTIONS,
    UNLABELLED_MODES,
    OrderPlan,
    concat_plans,
    difficulty_order,
    topic_order,
)

logger = logging.getLogger(__name__)

STATE_KEY = "verl_ebpo_ordering"
STATE_VERSION = 1
ORDERS = ("topic", "difficulty")


@dataclass
class OrderingOptions:
    """`data.ordering.*` (every key optional)."""

    order: str = "topic"  # topic | difficulty (set by the class; the key overrides it)
    field: str | None = None  # default extra_info.topic (topic) / extra_info.difficulty (difficulty)
    seed: int | None = None  # default data.seed, else 0
    cluster_order: Any = "first_seen"  # first_seen | name | random | easy_first | hard_first | [labels]
    difficulty_field: str = "extra_info.difficulty"  # for cluster_order easy_first / hard_first
    align: str = "none"  # none | drop | pad  (cluster boundaries on batch boundaries)
    batch_size: int | None = None  # for align; default data.train_batch_size
    direction: str = "easy_to_hard"  # difficulty: easy_to_hard | hard_to_easy
    higher_is_easier: bool = True  # the difficulty field is a pass rate (True) or a level (False)
    unlabelled: str = "error"  # error | drop | first | last
    passes: int = 1  # passes unrolled into one epoch, each reshuffled (topic) / re-tie-broken (difficulty)
    apply_to: str = "train"  # train | all

    @classmethod
    def from_data_config(cls, data_config: Any, default_order: str) -> "OrderingOptions":
        raw = data_config.get("ordering", None) if data_config is not None else None
        if raw is None:
            raw = {}
        try:
            from omegaconf import DictConfig, OmegaConf

            if isinstance(raw, DictConfig):
                raw = OmegaConf.to_container(raw, resolve=True)
        except ImportError:  # pragma: no cover
            pass
        if not isinstance(raw, dict):
            raise ValueError(f"data.ordering must be a mapping of options, got {raw!r}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(f"unknown data.ordering option(s) {unknown}; known: {sorted(known)}")
        opts = cls(order=default_order, **{k: v for k, v in raw.items() if v is not None or k == "seed"})
        if opts.seed is None:
            opts.seed = data_config.get("seed", None) if data_config is not None else None
        if opts.seed is None:
            opts.seed = 0
        if opts.field is None:
            opts.field = "extra_info.topic" if opts.order == "topic" else "extra_info.difficulty"
        if opts.batch_size is None and opts.align != "none" and data_config is not None:
            opts.batch_size = data_config.get("train_batch_size", None)
        opts.validate()
        return opts

    def validate(self) -> None:
        def choice(name, allowed):
            if getattr(self, name) not in allowed:
                raise ValueError(f"data.ordering.{name}={getattr(self, name)!r} is not one of {list(allowed)}")

        choice("order", ORDERS)
        choice("align", ALIGN_MODES)
        choice("direction", DIRECTIONS)
        choice("unlabelled", UNLABELLED_MODES)
        choice("apply_to", ("train", "all"))
        if isinstance(self.cluster_order, str):
            choice("cluster_order", CLUSTER_ORDERS)
        elif not isinstance(self.cluster_order, (list, tuple)):
            raise ValueError(
                f"data.ordering.cluster_order must be a name or a list of labels, got {self.cluster_order!r}"
            )
        if not isinstance(self.passes, int) or isinstance(self.passes, bool) or self.passes < 1:
            raise ValueError(f"data.ordering.passes must be an integer >= 1, got {self.passes!r}")
        if not isinstance(self.higher_is_easier, bool):
            raise ValueError(f"data.ordering.higher_is_easier must be true or false, got {self.higher_is_easier!r}")


def build_plan(table: Any, opts: OrderingOptions) -> OrderPlan:
    """The visiting order of `table`'s rows (`table`: anything `fields.read_field` reads)."""
    plans = []
    if opts.order == "topic":
        labels = read_field(table, opts.field)
        difficulties = None
        if opts.cluster_order in ("easy_first", "hard_first"):
            difficulties = read_field(table, opts.difficulty_field)
        for p in range(opts.passes):
            plans.append(
                topic_order(
                    labels,
                    seed=opts.seed,
                    epoch=p,
                    cluster_order=opts.cluster_order,
                    difficulties=difficulties,
                    higher_is_easier=opts.higher_is_easier,
                    batch_size=opts.batch_size,
                    align=opts.align,
                    unlabelled=opts.unlabelled,
                    field_name=opts.field,
                )
            )
    else:
        values = read_field(table, opts.field)
        for p in range(opts.passes):
            plans.append(
                difficulty_order(
                    values,
                    seed=opts.seed,
                    epoch=p,
                    direction=opts.direction,
                    higher_is_easier=opts.higher_is_easier,
                    unlabelled=opts.unlabelled,
                    field_name=opts.field,
                )
            )
    return concat_plans(plans)


def _norm_files(files: Any) -> list[str]:
    if files is None:
        return []
    if isinstance(files, (str, os.PathLike)):
        files = [files]
    return [os.path.abspath(os.path.expanduser(os.fspath(f))) for f in files]


class OrderedRLHFDataset(RLHFDataset):
    """verl's RLHFDataset with its rows put in the `data.ordering` order (train files only by default)."""

    default_order = "topic"

    def _read_files_and_tokenize(self):
        super()._read_files_and_tokenize()
        self._apply_ordering()

    # -- ordering ---------------------------------------------------------------------------------
    def _is_train_dataset(self) -> bool:
        train = _norm_files(self.config.get("train_files", None))
        mine = _norm_files(getattr(self, "original_data_files", self.data_files))
        return bool(train) and train == mine

    def _apply_ordering(self) -> None:
        self.ordering_options = opts = OrderingOptions.from_data_config(self.config, self.default_order)
        self.ordering_plan = None
        self._ordering_state = None
        if opts.apply_to == "train" and not self._is_train_dataset():
            return  # the validation set: unchanged
        if self.config.get("shuffle", False):
            raise ValueError(
                f"{type(self).__name__} orders the prompts itself; data.shuffle=True would reshuffle them. "
                "Set data.shuffle=False."
            )
        plan = build_plan(self.dataframe, opts)
        self.dataframe = self.dataframe.select(plan.indices.tolist())
        self.ordering_plan = plan
        self._ordering_state = {"version": STATE_VERSION, "fingerprint": plan.fingerprint(), "length": len(plan)}
        msg = f"[verl_ebpo] {type(self).__name__}: {plan.summary()}"
        print(msg)
        logger.info(msg)

    # -- torchdata Stateful: a fingerprint of the order travels in data.pt --------------------------
    def state_dict(self) -> dict:
        return {STATE_KEY: self._ordering_state} if getattr(self, "_ordering_state", None) else {}

    def load_state_dict(self, state_dict: dict) -> None:
        saved = (state_dict or {}).get(STATE_KEY)
        mine = getattr(self, "_ordering_state", None)
        if not saved or not mine:
            return
        if saved["fingerprint"] != mine["fingerprint"] or saved["length"] != mine["length"]:
            raise ValueError(
                f"{type(self).__name__}: the checkpoint's data.pt was written for a different prompt order "
                f"(saved {saved['fingerprint']} over {saved['length']} prompts, now {mine['fingerprint']} over "
                f"{mine['length']}): the train file or data.ordering / data.seed changed since the checkpoint, "
                "so resuming would repeat or skip prompts. Restore the old settings or start a fresh run."
            )


class TopicOrderedDataset(OrderedRLHFDataset):
    """Rows grouped by `data.ordering.field` (default extra_info.topic), clusters one after another."""

    default_order = "topic"


class DifficultyOrderedDataset(OrderedRLHFDataset):
    """Rows sorted by `data.ordering.field` (default extra_info.difficulty, a pass rate), easy -> hard."""

    default_order = "difficulty"
