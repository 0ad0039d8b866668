"""verl dataset classes that put their rows in topic or difficulty order (the `data.custom_cls` route).

verl 0.9.1 builds the train dataset from `data.custom_cls.{path,name}` and, with `data.shuffle=False`, reads it
through a SequentialSampler in a StatefulDataLoader with `drop_last=True`. These subclasses of verl's `RLHFDataset`
reorder their rows once, right after verl has read (and length-filtered) the files, so the stock loader visits them
in that order (`data.ordering.*`: docs/ordering.md). The order is a pure function of the file and the options, so a
resumed run (verl's `data.pt`) rebuilds it and the loader continues after the last prompt it served; `data.pt`
carries fingerprints of the order and of the rows' content, and a resume over a different one is refused.
Only the train dataset is reordered: verl builds the validation dataset from the same class through
`create_rl_dataset(..., is_train=False)`, and that one keeps verl's behaviour (never reordered or padded, even when
`data.val_files` equals `data.train_files`).
"""

from __future__ import annotations

import hashlib
import sys
from typing import Any

from verl.utils.dataset.rl_dataset import RLHFDataset

from verl_ebpo.samplers.fields import FieldNotFoundError, read_field
from verl_ebpo.samplers.ordering import OPTIONS, OrderingOptions, OrderPlan, plan_epoch

STATE_KEY = "verl_ebpo_ordering"
STATE_VERSION = 2
GROUND_TRUTH = "reward_model.ground_truth"  # where verl's reward managers read the answer

# The one private verl touch of the ordering: verl 0.9.1's `RLHFDataset.__init__` calls
# `self._read_files_and_tokenize()`, which reads the files, applies `train_max_samples` and the length filter
# and leaves the rows in `self.dataframe` (a datasets.Dataset); `resume_dataset_state` calls it again. The
# ordered datasets override it to reorder right after it.
# Public attributes read: `config`, `dataframe`, `data_files`, `original_data_files`, `prompt_key`.
# Canary: tests/test_samplers_verl.py::test_verl_read_hook_canary.
VERL_READ_HOOK = "_read_files_and_tokenize"


def options_from_data_config(data_config: Any, default_order: str) -> OrderingOptions:
    """`data.ordering.*` as the ordering's options; seed defaults to `data.seed`."""
    seed = data_config.get("seed", None)
    return OPTIONS[default_order].from_mapping(data_config.get("ordering", None), **({} if seed is None else {"seed": seed}))


def loader_batch(data_config: Any) -> int | None:
    """The batch of verl's train loader, as `_init_dataloader` computes it (it drops an incomplete last one)."""
    return data_config.get("gen_batch_size", None) or data_config.get("train_batch_size", None)


def build_plan(table: Any, opts: OrderingOptions, *, loader_batch: int | None = None) -> OrderPlan:
    """The visiting order of `table`'s rows for one epoch (`table`: anything `fields.read_field` reads)."""
    return plan_epoch(read_field(table, opts.field), opts, loader_batch=loader_batch)


def _verl_builds_the_train_set() -> bool | None:
    """`is_train` of verl's `create_rl_dataset` if it is building this dataset (None outside it: ordered): verl builds
    the train and the validation set from one class and tells only its builder which is which (canary:
    tests/test_samplers_verl.py::test_validation_is_never_reordered_even_from_the_train_files)."""
    frame = sys._getframe(1)
    while frame is not None and not (frame.f_code.co_name == "create_rl_dataset"
                                     and frame.f_globals.get("__name__", "").startswith("verl.")):
        frame = frame.f_back
    return None if frame is None else bool(frame.f_locals.get("is_train", True))


class OrderedRLHFDataset(RLHFDataset):
    """verl's RLHFDataset with its rows put in the `data.ordering` order (train files only by default)."""

    default_order = "topic"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._verl_is_train = _verl_builds_the_train_set()  # before verl's __init__ reads (and orders) the rows
        super().__init__(*args, **kwargs)

    def _read_files_and_tokenize(self):  # VERL_READ_HOOK (see above)
        super()._read_files_and_tokenize()
        self._apply_ordering()

    def _apply_ordering(self) -> None:
        self.ordering_options = opts = options_from_data_config(self.config, self.default_order)
        self.ordering_plan = self._ordering_state = None
        if self._verl_is_train is False:
            return  # the validation set: verl's own
        name, files = type(self).__name__, ", ".join(map(str, self.original_data_files))
        if self.config.get("shuffle", False):
            raise ValueError(f"{name} orders the prompts itself; data.shuffle=True would reshuffle them. Set "
                             "data.shuffle=False.")
        plan = build_plan(self.dataframe, opts, loader_batch=loader_batch(self.config))  # it drops an incomplete one
        if len(plan) == 0:
            raise ValueError(f"{name}: no row of {files} is left after verl's filters (data.max_prompt_length with "
                             f"filter_overlong_prompts, train_max_samples) and unlabelled=drop: nothing to order")
        content = hashlib.sha256()  # the rows' prompt, ground truth and ordering field, in file order
        for path in (self.prompt_key, GROUND_TRUTH, opts.field):
            try:
                content.update(repr(read_field(self.dataframe, path)).encode())
            except FieldNotFoundError:
                content.update(b"absent")
        self.dataframe = self.dataframe.select(plan.indices)  # an array: datasets hashes it ~5x faster than a list
        self.ordering_plan = plan
        self._ordering_state = {"version": STATE_VERSION, "fingerprint": plan.fingerprint(), "length": len(plan),
                                "content": content.hexdigest()[:16]}
        print(f"[verl_ebpo] {name}: {plan.summary()}")

    # torchdata Stateful: the fingerprints travel in data.pt
    def state_dict(self) -> dict:
        return {STATE_KEY: self._ordering_state} if self._ordering_state else {}

    def load_state_dict(self, state_dict: dict) -> None:
        saved, mine = (state_dict or {}).get(STATE_KEY), self._ordering_state
        if saved and mine and saved != mine:
            raise ValueError(f"{type(self).__name__}: the checkpoint's data.pt was written for a different prompt "
                             "order, or the train rows changed since the checkpoint (fingerprints of the order and "
                             f"of the prompt, {GROUND_TRUTH} and {self.ordering_options.field}: saved {saved}, now "
                             f"{mine}): the train file, data.ordering, data.seed or the batch size changed, so "
                             "resuming would repeat or skip prompts. Restore them or start a fresh run.")

class TopicOrderedDataset(OrderedRLHFDataset):
    """Rows grouped by `data.ordering.field` (default extra_info.topic), clusters one after another."""

    default_order = "topic"


class DifficultyOrderedDataset(OrderedRLHFDataset):
    """Rows sorted by `data.ordering.field` (default extra_info.difficulty, a pass rate), easy -> hard."""

    default_order = "difficulty"
