#!/usr/bin/env bash
# Usage: bash recipes/<model>/run_grpo.sh [Hydra overrides...]   (GRPO, verl's built-in; keys in recipes/algos/grpo.sh)
set -euo pipefail
ALGO=grpo
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
recipe_run "$@"
