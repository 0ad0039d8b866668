"""The CPU backend's tiny task: "n+1=" -> the next digit, scored by the first digit the model writes.

Used by `python -m verl_ebpo.tools.cpu.run` and by `verl-ebpo demo`; verl reaches the reward as
`reward.custom_reward_function.path=pkg://verl_ebpo.tools.tiny.task`, `name=compute_score`.

Small enough for an 84K-parameter model to learn on a CPU in a few minutes, hard enough at the start
(a random model writes the right digit first about 5% of the time) that most groups of G=4 answers
fail entirely: the regime where GRPO's group-mean baseline gives no signal and EBPO's prior does.
"""

from __future__ import annotations

import random

DATA_SOURCE = "verl_ebpo/successor"
OPERANDS = tuple(range(9))  # answers 1..9: always one digit


def question(n: int) -> str:
    return f"{n}+1="


def iter_rows(count: int, seed: int, split: str = "train"):
    """`count` rows in verl's RL format, operands drawn uniformly (seeded), one at a time."""
    from verl_ebpo.tools.tiny.assets import rl_row

    rng = random.Random(seed)
    for i in range(count):
        n = rng.choice(OPERANDS)
        yield rl_row(i, question(n), str(n + 1), DATA_SOURCE, split=split, extra_info={"operand": n})


def make_rows(count: int, seed: int, split: str = "train") -> list[dict]:
    """`iter_rows` as a list (small counts only)."""
    return list(iter_rows(count, seed, split))


def validation_rows() -> list[dict]:
    """Each question once."""
    from verl_ebpo.tools.tiny.assets import rl_row

    return [rl_row(i, question(n), str(n + 1), DATA_SOURCE, split="val") for i, n in enumerate(OPERANDS)]


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> float:
    """verl custom reward: 1.0 if the first digit in the answer is the ground truth, else 0.0."""
    return float(next((ch for ch in solution_str or "" if ch.isdigit()), None) == str(ground_truth).strip())
