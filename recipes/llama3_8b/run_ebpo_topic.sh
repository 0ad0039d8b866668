#!/usr/bin/env bash
# Usage: bash recipes/<model>/run_ebpo_topic.sh [Hydra overrides...]   (EBPO-topic; keys in recipes/algos/ebpo_topic.sh)
set -euo pipefail
ALGO=ebpo_topic
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
recipe_run "$@"
