# shellcheck shell=bash
# EBPO-topic: EBPO with the training data presented topic cluster by topic cluster (the paper's main
# table). Needs the topic labels: recipes/data/label_data.sh topics.
# Sourced by recipes/common.sh for ALGO=ebpo_topic: defaults first, then algo_args fills ALGO_ARGS.
ORDER="topic"

algo_args() {
    ALGO_ARGS=(
        algorithm.adv_estimator=ebpo
        algorithm.norm_adv_by_std_in_grpo=True
        +algorithm.ebpo.prior_scope="$EBPO_PRIOR_SCOPE"
        trainer.checkpoint_callback_class=verl_ebpo.EBPOCheckpointCallback
    )
}
