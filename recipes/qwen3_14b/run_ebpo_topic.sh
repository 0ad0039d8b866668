#!/usr/bin/env bash
# EBPO-topic: EBPO with the training data presented topic cluster by topic cluster (the paper's main
# table). Needs the topic labels: recipes/data/label_data.sh topics.
# Usage: bash recipes/<model>/run_ebpo_topic.sh [Hydra overrides...]   (environment: recipes/common.sh)
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
ALGO=ebpo_topic
ORDER="topic"
# shellcheck source=../common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
ALGO_ARGS=(
    algorithm.adv_estimator=ebpo
    algorithm.norm_adv_by_std_in_grpo=True
    +algorithm.ebpo.prior_scope="$EBPO_PRIOR_SCOPE"
    trainer.checkpoint_callback_class=verl_ebpo.EBPOCheckpointCallback
)
recipe_run "$@"
