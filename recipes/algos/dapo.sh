# shellcheck shell=bash
# DAPO (arXiv 2503.14476) with verl's built-ins: clip-higher (0.28), dynamic sampling (groups whose
# answers are all right or all wrong are dropped and refilled) and overlong reward shaping (verl's
# `dapo` reward manager around the same verifier as the other runs). Token-mean loss is shared.
# Sourced by recipes/common.sh for ALGO=dapo: defaults first, then algo_args fills ALGO_ARGS.

algo_args() {
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
}
