"""torch Samplers for topic and difficulty orders, resumable through torchdata's StatefulDataLoader.

For users who build their own DataLoader. (Inside verl's stock trainer use the dataset classes of
`verl_ebpo.samplers.dataset` instead: verl 0.9.1 has no sampler plug-in.)

State: `state_dict()` -> {"schema", "version", "epoch", "yielded", "fingerprint"}. StatefulDataLoader
(num_workers 0 or > 0) saves it with every batch and restores it; iteration then continues at the
next unseen prompt of the same epoch. The epoch counter advances when an iteration runs to its end
(or by `set_epoch`). With `reshuffle_each_epoch=True` each epoch draws a new shuffle inside clusters
(topic) or a new tie-break (difficulty); the cluster order and cluster sizes never change.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, ClassVar, Iterator, Sequence

from torch.utils.data import Sampler

from verl_ebpo.samplers.fields import read_field
from verl_ebpo.samplers.options import DifficultyOptions, OrderingOptions, TopicOptions
from verl_ebpo.samplers.ordering import OrderPlan, plan_epoch

SCHEMA = "verl_ebpo.ordered_sampler"
SCHEMA_VERSION = 1


class OrderedSampler(Sampler[int]):
    """Yields `plan_fn(epoch).indices`; stateful (epoch, position) for exact mid-epoch resume."""

    def __init__(self, plan_fn: Callable[[int], OrderPlan], *, reshuffle_each_epoch: bool = True) -> None:
        self._plan_fn = plan_fn
        self.reshuffle_each_epoch = bool(reshuffle_each_epoch)
        self.epoch = 0
        self.yielded = 0
        self._next_yielded: int | None = None
        self._cache: tuple[int, OrderPlan] | None = None
        self._length = len(self.plan(0))
        self._fingerprint = self.plan(0).fingerprint()

    # -- the order --------------------------------------------------------------------------------
    def plan(self, epoch: int | None = None) -> OrderPlan:
        e = self.epoch if epoch is None else int(epoch)
        key = e if self.reshuffle_each_epoch else 0
        if self._cache is None or self._cache[0] != key:
            self._cache = (key, self._plan_fn(key))
        return self._cache[1]

    def __len__(self) -> int:
        return self._length

    def set_epoch(self, epoch: int) -> None:
        """Start the next iteration at the beginning of `epoch` (as DistributedSampler.set_epoch).

        Setting the epoch a restored state is already in keeps the restored position (training loops call
        set_epoch at the top of every epoch, also right after load_state_dict)."""
        if int(epoch) == self.epoch and self._next_yielded is not None:
            return
        self.epoch = int(epoch)
        self.yielded = 0
        self._next_yielded = None

    def __iter__(self) -> Iterator[int]:
        # A generator: the start position is read when iteration begins, not when iter() is called
        # (StatefulDataLoader creates an iterator before it loads the saved state).
        start = self._next_yielded if self._next_yielded is not None else 0
        self._next_yielded = None
        indices = self.plan().indices
        self.yielded = start
        for idx in indices[start:].tolist():
            self.yielded += 1
            yield idx
        self.epoch += 1
        self.yielded = 0

    # -- state ------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "version": SCHEMA_VERSION,
            "epoch": self.epoch,
            "yielded": self.yielded,
            "fingerprint": self._fingerprint,
            "length": self._length,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict.get("schema") != SCHEMA:
            raise ValueError(f"not an ordered-sampler state (schema {state_dict.get('schema')!r})")
        if int(state_dict.get("version", 0)) > SCHEMA_VERSION:
            raise ValueError(
                f"sampler state version {state_dict['version']} is newer than this code ({SCHEMA_VERSION})"
            )
        if state_dict["fingerprint"] != self._fingerprint or int(state_dict["length"]) != self._length:
            raise ValueError(
                "the saved sampler state belongs to a different prompt order "
                f"(saved fingerprint {state_dict['fingerprint']} over {state_dict['length']} visits, "
                f"now {self._fingerprint} over {self._length}): the data or the ordering options changed "
                "since the checkpoint; resuming would repeat or skip prompts"
            )
        yielded = int(state_dict["yielded"])
        if not 0 <= yielded <= self._length:
            raise ValueError(f"sampler state position {yielded} outside 0..{self._length}")
        self.epoch = int(state_dict["epoch"])
        self.yielded = yielded
        self._next_yielded = yielded


class _OptionsSampler(OrderedSampler):
    """An OrderedSampler over `plan_epoch(values, options)`: the ordering's spec is its one set of options."""

    OPTIONS: ClassVar[type[OrderingOptions]]

    def __init__(
        self,
        values: Sequence[Any],
        options: OrderingOptions,
        *,
        difficulties: Sequence[Any] | None = None,
        reshuffle_each_epoch: bool,
        loader_batch_size: int | None,
    ) -> None:
        self.options = options
        values = list(values)
        difficulties = None if difficulties is None else list(difficulties)

        def plan_fn(epoch: int) -> OrderPlan:
            return plan_epoch(values, options, difficulties=difficulties, epoch=epoch, loader_batch=loader_batch_size)

        super().__init__(plan_fn, reshuffle_each_epoch=reshuffle_each_epoch)

    @classmethod
    def from_dataset(cls, dataset: Any, field: str | None = None, options: OrderingOptions | None = None, **kwargs: Any):
        """Values read from `dataset` (RLHFDataset, datasets.Dataset, pyarrow Table, DataFrame, rows).

        `field` (default: the options' `field`) names the values; other keyword arguments as for the class."""
        names = {f.name for f in dataclasses.fields(cls.OPTIONS)}
        given = {k: kwargs.pop(k) for k in list(kwargs) if k in names}
        opts = cls.OPTIONS.build(options, **given, **({"field": field} if field is not None else {}))
        value_field, *more = opts.value_fields()
        if more:
            kwargs["difficulties"] = read_field(dataset, more[0])
        return cls(read_field(dataset, value_field), opts, **kwargs)


class TopicSampler(_OptionsSampler):
    """Clusters one after another, shuffled inside (`ordering.topic_order`; options: `TopicOptions`).

    By default each epoch reshuffles inside clusters (reshuffle_each_epoch=True); cluster order and sizes stay.
    loader_batch_size: your DataLoader's batch_size when it has drop_last=True: the epoch's last incomplete
    batch is then completed / cut / refused as `remainder` says (None: nothing is done about it).
    """

    OPTIONS = TopicOptions

    def __init__(
        self,
        labels: Sequence[Any],
        options: TopicOptions | None = None,
        *,
        difficulties: Sequence[Any] | None = None,
        reshuffle_each_epoch: bool = True,
        loader_batch_size: int | None = None,
        **option_values: Any,
    ) -> None:
        super().__init__(labels, TopicOptions.build(options, **option_values), difficulties=difficulties,
                         reshuffle_each_epoch=reshuffle_each_epoch, loader_batch_size=loader_batch_size)


class DifficultySampler(_OptionsSampler):
    """Easy -> hard (or hard -> easy), ties in seeded random order (`ordering.difficulty_order`; options:
    `DifficultyOptions`).

    By default the order is the same every epoch (reshuffle_each_epoch=False); with True the ties are
    re-broken each epoch. loader_batch_size: as for `TopicSampler`.
    """

    OPTIONS = DifficultyOptions

    def __init__(
        self,
        values: Sequence[Any],
        options: DifficultyOptions | None = None,
        *,
        reshuffle_each_epoch: bool = False,
        loader_batch_size: int | None = None,
        **option_values: Any,
    ) -> None:
        super().__init__(values, DifficultyOptions.build(options, **option_values),
                         reshuffle_each_epoch=reshuffle_each_epoch, loader_batch_size=loader_batch_size)
