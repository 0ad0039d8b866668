#!/usr/bin/env bash
# Usage: bash recipes/<model>/run_dapo.sh [Hydra overrides...]   (DAPO (arXiv 2503.14476) with verl's built-ins; keys in recipes/algos/dapo.sh)
set -euo pipefail
ALGO=dapo
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
recipe_run "$@"
