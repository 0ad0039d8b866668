"""Ordering labels for a verl RL parquet file: `topics.label_topics` (copy a field, or cluster the problems'
embeddings -> `extra_info.topic`), `difficulty.label_difficulty` (a model's pass rate -> `extra_info.difficulty`),
`io` (inputs, atomic outputs, rows without a value) and `cli` (`verl-ebpo label-topics` / `label-difficulty`)."""

from verl_ebpo.tools.labeling.difficulty import label_difficulty, read_rollouts
from verl_ebpo.tools.labeling.io import LabelingError, open_text_input, read_table
from verl_ebpo.tools.labeling.topics import label_topics

__all__ = ["LabelingError", "label_difficulty", "label_topics", "open_text_input", "read_rollouts", "read_table"]
