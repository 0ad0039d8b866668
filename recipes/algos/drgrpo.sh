# shellcheck shell=bash
# Dr.GRPO (arXiv 2503.20783) with verl's built-ins.
#   paper:   no division by the group's std, and a sequence loss summed over tokens and divided by a
#            constant (the response budget) instead of each length: true Dr.GRPO.
#   authors: no division by the group's std, token-mean loss (drgrpo_fsdp_math_17k_*.sh @75b0147 set
#            loss_agg_mode="token-mean"): only the std normalisation is Dr.GRPO's.
# Sourced by recipes/common.sh for ALGO=drgrpo: schedule and order defaults first, then algo_args.
SCHEDULE=baseline

algo_args() {
    if [[ "$PROTOCOL" == authors ]]; then
        ALGO_ARGS=(
            algorithm.adv_estimator=grpo
            algorithm.norm_adv_by_std_in_grpo=False
            actor_rollout_ref.actor.loss_agg_mode=token-mean
        )
    else
        ALGO_ARGS=(
            algorithm.adv_estimator=grpo
            algorithm.norm_adv_by_std_in_grpo=False
            actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum-norm
            actor_rollout_ref.actor.loss_scale_factor="$MAX_RESPONSE_LENGTH"
        )
    fi
}
