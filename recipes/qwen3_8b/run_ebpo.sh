#!/usr/bin/env bash
# Usage: bash recipes/<model>/run_ebpo.sh [Hydra overrides...]   (EBPO (arXiv 2602.05165), random data order ("EBPO-naive"); keys in recipes/algos/ebpo.sh)
set -euo pipefail
ALGO=ebpo
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
recipe_run "$@"
