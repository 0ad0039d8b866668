"""Prompt orderings for EBPO: topic clusters (EBPO-topic) and an easy -> hard curriculum (EBPO-diff), and the replay
buffer that keeps a DAPO curriculum inside one pass (docs/ordering.md).

- `overrides(order, ...)`, `buffer_overrides(...)`: the Hydra overrides that plug them into verl's stock trainer;
  values are quoted for Hydra's grammar (an argv or `compose(overrides=...)`), not for a shell.
- `verl_ebpo.samplers.dataset`: `TopicOrderedDataset`, `DifficultyOrderedDataset` (`data.custom_cls`);
  `verl_ebpo.samplers.replay`: `TrackedReplayBuffer` (`trainer.v1.sampler.custom_sampler`). Both import verl.
- `verl_ebpo.samplers.ordering`: the options and the pure orderings (`plan_epoch(...).indices` is an own
  `DataLoader`'s sampler); `read_field`: a dotted field of an Arrow table or HF dataset.

Importing this package is light (numpy only).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from verl_ebpo.samplers.fields import FieldNotFoundError, read_field
from verl_ebpo.samplers.ordering import (OPTIONS, DifficultyOptions, OrderingOptions, OrderPlan, Segment,
                                         TopicOptions, UnlabelledRowsError, difficulty_order, plan_epoch, topic_order)

__all__ = ["DifficultyOptions", "OrderingOptions", "TopicOptions", "OrderPlan", "Segment", "UnlabelledRowsError",
           "difficulty_order", "plan_epoch", "topic_order", "overrides", "buffer_overrides", "FieldNotFoundError",
           "read_field"]

# sampler_kwargs.verl.<name> -> the verl config node it links to (resolved by verl before it builds the buffer), from
# which the buffer derives DAPO's arguments as verl does for its own (`replay.filter_arguments`)
VERL_CONFIG_LINKS = {
    "filter_groups": "algorithm.filter_groups",
    "train_batch_size": "data.train_batch_size",
    "gen_batch_size": "data.gen_batch_size",
    "sync_refill_failed_groups": "trainer.v1.sampler.sync_refill_failed_groups",
    "reward_model_enable": "reward.reward_model.enable",
    "reward_model_enable_resource_pool": "reward.reward_model.enable_resource_pool",
}
_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-/:]*$")


def hydra_value(value: Any) -> str:
    """A Python value in Hydra's override grammar."""
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, (int, float)):
        return repr(value)
    s = str(value)
    if _PLAIN.match(s) and s.lower() not in ("null", "true", "false", "nan", "inf"):
        return s
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def overrides(order: str, *, seed: int | None = None, total_epochs: int | None = None, **options: Any) -> list[str]:
    """Overrides for `python -m verl.trainer.main_ppo` that select a prompt order: "random" (EBPO-naive: verl's own
    data.shuffle=True), "topic" (EBPO-topic) or "difficulty" (EBPO-diff; the paper runs one epoch: total_epochs=1).
    options: `data.ordering.*` keys, checked by the order's options class (None: the default, not written); seed:
    verl's data.seed (also the ordering's default seed); total_epochs: trainer.total_epochs."""
    given = {k: v for k, v in options.items() if v is not None}
    if order == "random":
        if given:
            raise ValueError(f"order='random' takes no ordering options, got {sorted(given)}")
        out = ["data.shuffle=True"]
    elif order in OPTIONS:
        spec = OPTIONS[order].from_mapping(given)
        out = ["data.shuffle=False", "data.custom_cls.path=pkg://verl_ebpo.samplers.dataset",
               f"data.custom_cls.name={order.title()}OrderedDataset"]
        out += [f"++data.ordering.{f.name}={hydra_value(getattr(spec, f.name))}" for f in dataclasses.fields(spec)
                if f.name in given]
    else:
        raise ValueError(f"order={order!r} is not one of ['random', 'topic', 'difficulty']")
    out += [] if seed is None else [f"data.seed={int(seed)}"]
    return out + ([] if total_epochs is None else [f"trainer.total_epochs={int(total_epochs)}"])


def buffer_overrides(*, one_pass: bool = False, poll_interval_s: float | None = None) -> list[str]:
    """The overrides that plug `replay.TrackedReplayBuffer` into verl's V1 trainer (its options: docs/ordering.md)."""
    out = ["trainer.v1.sampler.custom_sampler.path=pkg://verl_ebpo.samplers.replay",
           "trainer.v1.sampler.custom_sampler.name=TrackedReplayBuffer",
           *(f"+trainer.v1.sampler.sampler_kwargs.verl.{k}=${{{node}}}" for k, node in VERL_CONFIG_LINKS.items())]
    if one_pass:
        out.append("+trainer.v1.sampler.sampler_kwargs.one_pass=true")
    if poll_interval_s is not None:
        out.append(f"+trainer.v1.sampler.sampler_kwargs.poll_interval_s={float(poll_interval_s):g}")
    return out
