# shellcheck shell=bash
# EBPO (arXiv 2602.05165), "EBPO-naive": the group mean is shrunk toward a global prior; the prior is
# saved with every checkpoint and restored on resume (verl_ebpo.EBPOCheckpointCallback).
#   paper:   a running prior over the whole run (Algorithm 1); random data order.
#   authors: the prior of their compute_ebpo_outcome_advantage (core_algos.py @75b0147: fresh Welford
#            statistics in every call, i.e. the current batch); data.shuffle=False over the unsorted
#            file (ebpo_fsdp_math_17k_naive_qwen3_*_multi_nodes.sh); 20 epochs, a checkpoint every 10 steps.
# Sourced by recipes/common.sh for ALGO=ebpo (and, through them, ebpo_topic/ebpo_diff): defaults first,
# then the keys of verl_ebpo.tools.algorithms. EBPO_PRIOR_SCOPE [running / batch] is set by common.sh.
# the verl keys: `python -m verl_ebpo.tools.algorithms ebpo --protocol paper|authors` (written once there)
ALGO_KEYS=ebpo
SCHEDULE=ebpo
if [[ "$PROTOCOL" == authors ]]; then
    DEFAULT_ORDER=file
fi
