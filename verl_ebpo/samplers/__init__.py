"""Prompt orderings for EBPO: topic clusters (EBPO-topic) and an easy -> hard curriculum (EBPO-diff).

- `TopicOptions`, `DifficultyOptions`: the one spec of each ordering's options (docs/ordering.md's tables).
- `overrides(order, ...)`: the Hydra overrides for verl's stock trainer (`python -m verl.trainer.main_ppo`).
- `verl_ebpo.samplers.dataset`: `TopicOrderedDataset`, `DifficultyOrderedDataset` (the `data.custom_cls` route;
  imports torch and verl, so it is not imported here).
- `topic_order`, `difficulty_order` (one pass), `plan_epoch` (passes and the last batch): the pure orderings;
  an own `DataLoader` takes `plan_epoch(...).indices` as its `sampler`.
- `read_field`: a (dotted) field of an Arrow table or HF dataset (the labelling tools
  write one with `verl_ebpo.tools.labeling.fields.set_field`).
- `verl_ebpo.tools.labeling` (library) and `.cli`: `verl-ebpo label-topics` / `label-difficulty`.

Importing this package is light (numpy only).
"""

from verl_ebpo.samplers.fields import FieldNotFoundError, read_field
from verl_ebpo.samplers.options import DifficultyOptions, OrderingOptions, TopicOptions
from verl_ebpo.samplers.ordering import OrderPlan, Segment, UnlabelledRowsError, difficulty_order, plan_epoch, topic_order
from verl_ebpo.samplers.overrides import overrides

__all__ = ["DifficultyOptions", "OrderingOptions", "TopicOptions", "OrderPlan", "Segment", "UnlabelledRowsError",
           "difficulty_order", "plan_epoch", "topic_order", "overrides", "FieldNotFoundError", "read_field"]
