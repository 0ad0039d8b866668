# shellcheck shell=bash
# GRPO, verl's built-in: baseline = the group's mean reward, advantage divided by the group's std.
# The same keys under both protocols. Sourced by recipes/common.sh for ALGO=grpo (after PROTOCOL is
# checked): schedule and order defaults first, then algo_args fills ALGO_ARGS.
SCHEDULE=baseline

algo_args() {
    ALGO_ARGS=(
        algorithm.adv_estimator=grpo
        algorithm.norm_adv_by_std_in_grpo=True
    )
}
