"""Math verifiable reward for verl (math-verify, with a hard time bound that works in threads).

    reward.custom_reward_function.path=pkg://verl_ebpo.rewards
    reward.custom_reward_function.name=compute_score

See docs/reward.md; `score` for the options, `extract` and `normalize` for what is graded, `pool` for the time bound.
"""

from verl_ebpo.rewards.extract import extract_answer, ground_truth_texts
from verl_ebpo.rewards.normalize import verifier_input
from verl_ebpo.rewards.pool import VerifierUnavailable, shutdown
from verl_ebpo.rewards.score import VERDICTS, RewardOptions, compute_score, is_correct, stats, verdict_of

__all__ = ["compute_score", "verdict_of", "is_correct", "verifier_input", "stats", "shutdown", "extract_answer",
           "ground_truth_texts", "RewardOptions", "VerifierUnavailable", "VERDICTS"]
