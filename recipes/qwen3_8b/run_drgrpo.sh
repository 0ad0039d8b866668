#!/usr/bin/env bash
# Usage: bash recipes/<model>/run_drgrpo.sh [Hydra overrides...]   (Dr.GRPO (arXiv 2503.20783) with verl's built-ins; keys in recipes/algos/drgrpo.sh)
set -euo pipefail
ALGO=drgrpo
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
recipe_run "$@"
