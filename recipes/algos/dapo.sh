# shellcheck shell=bash
# DAPO (arXiv 2503.14476) with verl's built-ins.
#   paper:   clip-higher (0.28), dynamic sampling (groups whose answers are all right or all wrong are
#            dropped and refilled) and overlong reward shaping (verl's `dapo` reward manager around the
#            same verifier as the other runs); token-mean loss (shared).
#   authors: what their verl ran of dapo_fsdp_math_17k_*.sh @75b0147: clip-higher 0.28, no std
#            normalisation, token-mean. Their `+algorithm.filter_groups.*` and `+reward_model.overlong_buffer.*`
#            keys were not read by that verl's main_ppo trainer and `naive` reward manager; verl 0.9.1 does
#            read algorithm.filter_groups, so they are NOT passed here.
# Sourced by recipes/common.sh for ALGO=dapo: schedule and order defaults first, then the keys of verl_ebpo.tools.algorithms.
# the verl keys: `python -m verl_ebpo.tools.algorithms dapo --protocol paper|authors` (written once there)
ALGO_KEYS=dapo
SCHEDULE=baseline
