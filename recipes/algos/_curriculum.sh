# shellcheck shell=bash
# The curriculum ("-diff") runs, shared by algos/{grpo,drgrpo,dapo,ebpo}_diff.sh: the algorithm's own keys
# (recipes/algos/$CURRICULUM_OF.sh) on the model's BASE model (model.env: BASE_MODEL_PATH,
# Qwen3-*-Base), the training data ordered easy -> hard by that base model's pass rate over 16 samples at
# temperature 1.0 (recipes/data/label_data.sh difficulty <model>; DifficultyOrderedDataset,
# data.shuffle=False), one epoch, the final checkpoint evaluated. Both protocols: the authors'
# *_fsdp_math_17k_sorted_qwen3_{8b,14b}_base_multi_nodes.sh @75b0147 ran exactly this for all four methods.
# shellcheck source=/dev/null
source "$RECIPES_DIR/algos/$CURRICULUM_OF.sh"
SCHEDULE=curriculum
CURRICULUM=1
ORDER="diff"
DEFAULT_ORDER="diff"
