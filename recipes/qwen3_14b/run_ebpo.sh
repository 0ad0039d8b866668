#!/usr/bin/env bash
# EBPO (arXiv 2602.05165), random data order ("EBPO-naive"): the group mean is shrunk toward a global
# prior learned online; the prior is saved with every checkpoint and restored on resume.
# Usage: bash recipes/<model>/run_ebpo.sh [Hydra overrides...]     (environment: recipes/common.sh)
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
ALGO=ebpo
# shellcheck source=../common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
ALGO_ARGS=(
    algorithm.adv_estimator=ebpo
    algorithm.norm_adv_by_std_in_grpo=True
    +algorithm.ebpo.prior_scope="$EBPO_PRIOR_SCOPE"
    trainer.checkpoint_callback_class=verl_ebpo.EBPOCheckpointCallback
)
recipe_run "$@"
