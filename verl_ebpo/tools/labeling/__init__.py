"""Ordering labels for a verl RL parquet file: a library and its command line.

- `topics.label_topics`: copy a field, or cluster the prompts' embeddings (k-means) -> `extra_info.topic`;
- `difficulty.label_difficulty`: a model's pass rate over its sampled answers -> `extra_info.difficulty`;
- `io`: reading inputs, writing outputs atomically, rows without a value (`LabelingError`);
- `cli`: `verl-ebpo label-topics` / `label-difficulty`. The scorer loader is `verl_ebpo.tools.scorer`.
"""

from verl_ebpo.tools.labeling.difficulty import label_difficulty, read_rollouts
from verl_ebpo.tools.labeling.io import (
    MISSING_CHOICES,
    LabelingError,
    apply_missing,
    check_outputs,
    open_text_input,
    read_table,
    write_table,
)
from verl_ebpo.tools.labeling.topics import (
    cluster_summary,
    embed_texts,
    format_summary,
    have_sklearn,
    kmeans_labels,
    label_topics,
    prompt_text,
)

__all__ = [
    "MISSING_CHOICES", "LabelingError", "apply_missing", "check_outputs", "cluster_summary", "embed_texts",
    "format_summary", "have_sklearn", "kmeans_labels", "label_difficulty", "label_topics", "open_text_input",
    "prompt_text", "read_rollouts", "read_table", "write_table",
]
