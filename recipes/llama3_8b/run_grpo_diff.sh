#!/usr/bin/env bash
# Usage: bash recipes/<model>/run_grpo_diff.sh [Hydra overrides...]   (GRPO-diff, the curriculum baseline; keys in recipes/algos/grpo_diff.sh)
set -euo pipefail
ALGO=grpo_diff
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
recipe_run "$@"
