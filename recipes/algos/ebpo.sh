# shellcheck shell=bash
# EBPO (arXiv 2602.05165), random data order ("EBPO-naive"): the group mean is shrunk toward a global
# prior learned online; the prior is saved with every checkpoint and restored on resume.
# Sourced by recipes/common.sh for ALGO=ebpo: defaults first, then algo_args fills ALGO_ARGS.

algo_args() {
    ALGO_ARGS=(
        algorithm.adv_estimator=ebpo
        algorithm.norm_adv_by_std_in_grpo=True
        +algorithm.ebpo.prior_scope="$EBPO_PRIOR_SCOPE"
        trainer.checkpoint_callback_class=verl_ebpo.EBPOCheckpointCallback
    )
}
