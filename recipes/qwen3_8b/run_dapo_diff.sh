#!/usr/bin/env bash
# Usage: bash recipes/<model>/run_dapo_diff.sh [Hydra overrides...]   (DAPO-diff; keys in recipes/algos/dapo_diff.sh)
set -euo pipefail
ALGO=dapo_diff
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
recipe_run "$@"
