"""Math verifiable reward for verl (math-verify, with a hard time bound that works in threads).

    reward.custom_reward_function.path=pkg://verl_ebpo.rewards
    reward.custom_reward_function.name=compute_score

See `verl_ebpo.rewards.score` for the options and `verl_ebpo.rewards.pool` for the timeout design.
Importing this package is light: math-verify is imported only inside the verifier processes.
"""

from verl_ebpo.rewards.extract import extract_answer, ground_truth_texts
from verl_ebpo.rewards.pool import VerifierUnavailable, shutdown
from verl_ebpo.rewards.score import VERDICTS, RewardOptions, compute_score, judge, stats

__all__ = [
    "compute_score",
    "judge",
    "stats",
    "shutdown",
    "extract_answer",
    "ground_truth_texts",
    "RewardOptions",
    "VerifierUnavailable",
    "VERDICTS",
]
