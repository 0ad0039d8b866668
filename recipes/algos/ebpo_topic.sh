# shellcheck shell=bash
# EBPO-topic: EBPO with the training data presented topic cluster by topic cluster (the paper's main
# table). Needs the topic labels: recipes/data/label_data.sh topics.
# Sourced by recipes/common.sh for ALGO=ebpo_topic: defaults first, then algo_args fills ALGO_ARGS.

# The same keys and schedule as plain EBPO (recipes/algos/ebpo.sh); only the data order differs.
# shellcheck source=/dev/null
source "$RECIPES_DIR/algos/ebpo.sh"
ORDER="topic"
DEFAULT_ORDER="topic"
