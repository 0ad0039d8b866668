# shellcheck shell=bash
# Dr.GRPO (arXiv 2503.20783) with verl's built-ins.
#   paper:   no division by the group's std, and a sequence loss summed over tokens and divided by a
#            constant (the response budget) instead of each length: true Dr.GRPO.
#   authors: no division by the group's std, token-mean loss (drgrpo_fsdp_math_17k_*.sh @75b0147 set
#            loss_agg_mode="token-mean"): only the std normalisation is Dr.GRPO's.
# Sourced by recipes/common.sh for ALGO=drgrpo: schedule and order defaults first, then the keys of verl_ebpo.tools.algorithms.
# the verl keys: `python -m verl_ebpo.tools.algorithms drgrpo --protocol paper|authors` (written once there)
ALGO_KEYS=drgrpo
SCHEDULE=baseline
