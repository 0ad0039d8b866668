# shellcheck shell=bash
# DAPO-diff: the curriculum run of recipes/algos/dapo.sh (see recipes/algos/_curriculum.sh): the base
# model, data ordered easy -> hard by its pass rate, one epoch. Needs recipes/data/label_data.sh difficulty <model>.
CURRICULUM_OF=dapo
# shellcheck source=/dev/null
source "$RECIPES_DIR/algos/_curriculum.sh"
