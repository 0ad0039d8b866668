# shellcheck shell=bash
# EBPO-diff: EBPO with the training data ordered easy -> hard by the base model's pass rate, one epoch,
# no shuffle (the paper's curriculum runs). Needs the labels: recipes/data/label_data.sh difficulty <model>.
# The same order for GRPO ("GRPO-diff"): ORDER=diff TOTAL_EPOCHS=1 TOTAL_STEPS=null bash recipes/<model>/run_grpo.sh
# Sourced by recipes/common.sh for ALGO=ebpo_diff: defaults first, then algo_args fills ALGO_ARGS.
ORDER="diff"
: "${TOTAL_EPOCHS:=1}"
: "${TOTAL_STEPS:=null}"

algo_args() {
    ALGO_ARGS=(
        algorithm.adv_estimator=ebpo
        algorithm.norm_adv_by_std_in_grpo=True
        +algorithm.ebpo.prior_scope="$EBPO_PRIOR_SCOPE"
        trainer.checkpoint_callback_class=verl_ebpo.EBPOCheckpointCallback
    )
}
