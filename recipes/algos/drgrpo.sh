# shellcheck shell=bash
# Dr.GRPO (arXiv 2503.20783) with verl's built-ins: no division by the group's std, and a sequence
# loss summed over tokens and divided by a constant (the response budget) instead of each length.
# Sourced by recipes/common.sh for ALGO=drgrpo: defaults first, then algo_args fills ALGO_ARGS.

algo_args() {
    ALGO_ARGS=(
        algorithm.adv_estimator=grpo
        algorithm.norm_adv_by_std_in_grpo=False
        actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum-norm
        actor_rollout_ref.actor.loss_scale_factor="$MAX_RESPONSE_LENGTH"
    )
}
