# shellcheck shell=bash
# GRPO, verl's built-in: baseline = the group's mean reward, advantage divided by the group's std.
# The same keys under both protocols. Sourced by recipes/common.sh for ALGO=grpo (after PROTOCOL is
# checked): schedule and order defaults first, then the keys of verl_ebpo.tools.algorithms.
# the verl keys: `python -m verl_ebpo.tools.algorithms grpo --protocol paper|authors` (written once there)
ALGO_KEYS=grpo
SCHEDULE=baseline
