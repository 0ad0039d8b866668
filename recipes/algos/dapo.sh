# shellcheck shell=bash
# DAPO (arXiv 2503.14476) with verl's built-ins.
#   paper:   clip-higher (0.28), dynamic sampling (groups whose answers are all right or all wrong are
#            dropped and refilled) and overlong reward shaping (verl's `dapo` reward manager around the
#            same verifier as the other runs); token-mean loss (shared).
#   authors: what their verl ran of dapo_fsdp_math_17k_*.sh @75b0147: clip-higher 0.28, no std
#            normalisation, token-mean. Their `+algorithm.filter_groups.*` and `+reward_model.overlong_buffer.*`
#            keys were not read by that verl's main_ppo trainer and `naive` reward manager; verl 0.9.1 does
#            read algorithm.filter_groups, so they are NOT passed here.
# Sourced by recipes/common.sh for ALGO=dapo: schedule and order defaults first, then algo_args.
SCHEDULE=baseline

algo_args() {
    if [[ "$PROTOCOL" == authors ]]; then
        ALGO_ARGS=(
            algorithm.adv_estimator=grpo
            algorithm.norm_adv_by_std_in_grpo=False
            actor_rollout_ref.actor.clip_ratio_high=0.28
        )
    else
        ALGO_ARGS=(
            algorithm.adv_estimator=grpo
            algorithm.norm_adv_by_std_in_grpo=True
            actor_rollout_ref.actor.clip_ratio_high=0.28
            algorithm.filter_groups.enable=True
            algorithm.filter_groups.metric=acc
            reward.reward_manager.name=dapo
            +reward.reward_kwargs.max_resp_len="$MAX_RESPONSE_LENGTH"
            +reward.reward_kwargs.overlong_buffer_cfg.enable=True
            +reward.reward_kwargs.overlong_buffer_cfg.len="$OVERLONG_BUFFER_LEN"
            +reward.reward_kwargs.overlong_buffer_cfg.penalty_factor="$OVERLONG_PENALTY"
            +reward.reward_kwargs.overlong_buffer_cfg.log=False
        )
    fi
}
