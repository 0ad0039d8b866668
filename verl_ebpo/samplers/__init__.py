"""Prompt orderings for EBPO: topic clusters (EBPO-topic) and an easy -> hard curriculum (EBPO-diff).

- `TopicOptions`, `DifficultyOptions`: the one spec of each ordering's options (docs/ordering.md's tables).
- `overrides(order, ...)`: the Hydra overrides for verl's stock trainer (`python -m verl.trainer.main_ppo`).
- `verl_ebpo.samplers.dataset`: `TopicOrderedDataset`, `DifficultyOrderedDataset` (the `data.custom_cls` route).
- `TopicSampler`, `DifficultySampler`: resumable torch Samplers for hand-built loaders.
- `topic_order`, `difficulty_order` (one pass), `plan_epoch` (passes and the last batch): the pure orderings.
- `verl_ebpo.tools.labeling` (library) and `.cli`: `verl-ebpo label-topics` / `label-difficulty`.

Importing this package is light (numpy only); torch and verl load when a sampler or dataset is used.
"""

from verl_ebpo.samplers.options import DifficultyOptions, OrderingOptions, TopicOptions
from verl_ebpo.samplers.ordering import (
    OrderPlan,
    Segment,
    UnlabelledRowsError,
    difficulty_order,
    plan_epoch,
    topic_order,
)
from verl_ebpo.samplers.overrides import overrides

_LAZY = {
    "OrderedSampler": "verl_ebpo.samplers.sampler",
    "TopicSampler": "verl_ebpo.samplers.sampler",
    "DifficultySampler": "verl_ebpo.samplers.sampler",
    "OrderedRLHFDataset": "verl_ebpo.samplers.dataset",
    "TopicOrderedDataset": "verl_ebpo.samplers.dataset",
    "DifficultyOrderedDataset": "verl_ebpo.samplers.dataset",
    "read_field": "verl_ebpo.samplers.fields",
    "set_field": "verl_ebpo.samplers.fields",
    "FieldNotFoundError": "verl_ebpo.samplers.fields",
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'verl_ebpo.samplers' has no attribute {name!r}")


__all__ = [
    "DifficultyOptions",
    "OrderingOptions",
    "TopicOptions",
    "OrderPlan",
    "Segment",
    "UnlabelledRowsError",
    "difficulty_order",
    "plan_epoch",
    "topic_order",
    "overrides",
    *_LAZY,
]
