"""Math verifiable reward for verl (math-verify, with a hard time bound that works in threads).

    reward.custom_reward_function.path=pkg://verl_ebpo.rewards
    reward.custom_reward_function.name=compute_score

See docs/reward.md; `score` for the options, `extract` and `normalize` for what is graded, `pool` for the time bound.
"""

from verl_ebpo.rewards.pool import shutdown  # noqa: F401
from verl_ebpo.rewards.score import compute_score  # noqa: F401
