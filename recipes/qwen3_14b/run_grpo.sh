#!/usr/bin/env bash
# GRPO, verl's built-in: baseline = the group's mean reward, advantage divided by the group's std.
# Usage: bash recipes/<model>/run_grpo.sh [Hydra overrides...]     (environment: recipes/common.sh)
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
ALGO=grpo
# shellcheck source=../common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
ALGO_ARGS=(
    algorithm.adv_estimator=grpo
    algorithm.norm_adv_by_std_in_grpo=True
)
recipe_run "$@"
