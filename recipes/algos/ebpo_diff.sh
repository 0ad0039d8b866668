# shellcheck shell=bash
# EBPO-diff: EBPO with the training data ordered easy -> hard by the base model's pass rate, one epoch,
# no shuffle (the paper's curriculum runs). Needs the labels: recipes/data/label_data.sh difficulty <model>.
# The same order for GRPO ("GRPO-diff"): ORDER=diff TOTAL_EPOCHS=1 TOTAL_STEPS=null bash recipes/<model>/run_grpo.sh
# Sourced by recipes/common.sh for ALGO=ebpo_diff: defaults first, then algo_args fills ALGO_ARGS.
ORDER="diff"
: "${TOTAL_EPOCHS:=1}"
: "${TOTAL_STEPS:=null}"

# The same keys as plain EBPO (recipes/algos/ebpo.sh); only the data order differs.
# shellcheck source=/dev/null
source "$RECIPES_DIR/algos/ebpo.sh"
