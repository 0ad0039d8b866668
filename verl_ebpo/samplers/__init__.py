"""Prompt orderings for EBPO: topic clusters (EBPO-topic) and an easy -> hard curriculum (EBPO-diff), and the replay
buffer that keeps a DAPO curriculum inside one pass (docs/ordering.md).

- `verl_ebpo.samplers.dataset`: `TopicOrderedDataset`, `DifficultyOrderedDataset` (`data.custom_cls`);
  `verl_ebpo.samplers.replay`: `TrackedReplayBuffer` (`trainer.v1.sampler.custom_sampler`). Both import verl.
- `verl_ebpo.samplers.ordering`: the options and the pure orderings (`plan_epoch(...).indices` is an own
  `DataLoader`'s sampler); `verl_ebpo.samplers.fields.read_field`: a dotted field of an Arrow table or HF dataset.
"""
