#!/usr/bin/env bash
# Usage: bash recipes/<model>/run_drgrpo_diff.sh [Hydra overrides...]   (Dr.GRPO-diff; keys in recipes/algos/drgrpo_diff.sh)
set -euo pipefail
ALGO=drgrpo_diff
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
recipe_run "$@"
