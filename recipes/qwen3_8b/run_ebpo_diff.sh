#!/usr/bin/env bash
# Usage: bash recipes/<model>/run_ebpo_diff.sh [Hydra overrides...]   (EBPO-diff; keys in recipes/algos/ebpo_diff.sh)
set -euo pipefail
ALGO=ebpo_diff
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
recipe_run "$@"
