"""`compute_score`: the math reward verl loads with

    reward.custom_reward_function.path=pkg://verl_ebpo.rewards
    reward.custom_reward_function.name=compute_score

Options come as keyword arguments (`+reward.custom_reward_function.reward_kwargs.KEY=VALUE`), declared once in
`RewardOptions`. `is_correct` turns any scorer's result into the verdict training uses (labelling and evaluation
tools call it too).
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass, fields
from typing import Any, Optional

from verl_ebpo.rewards.extract import ground_truth_texts, to_text
from verl_ebpo.rewards.normalize import EMPTY_INPUT, verifier_input
from verl_ebpo.rewards.pool import current_pool, get_pool

logger = logging.getLogger(__name__)

VERDICTS = ("correct", "wrong", "no_answer", "too_long", "timeout", "error")
# Keyword arguments verl's reward managers pass that this scorer has no use for.
_VERL_EXTRA_KWARGS = frozenset({"reward_router_address", "reward_model_tokenizer"})


_RANGES = {"timeout": (0.0, 3600.0), "kill_grace": (0.0, 600.0), "processes": (1, 256), "max_answer_chars": (1, 10**7),
           "memory_limit_mb": (0, 1 << 30)}


@dataclass(frozen=True)
class RewardOptions:
    correct_score: float = 1.0  # score of a correct answer
    wrong_score: float = 0.0  # score of a wrong answer, a timeout, an over-long answer or an error; -1 for DAPO's ±1
    no_answer_score: Optional[float] = None  # score when no answer can be extracted (format penalty); None: wrong_score
    timeout: float = 3.0  # in (0, 3600]: wall-clock seconds of verifier time per answer; past it the answer is wrong
    kill_grace: float = 2.0  # in (0, 600]: extra seconds before a verifier that ignores its timeout is killed
    processes: int = 2  # in [1, 256]: verifiers of this process's one pool (the largest asked, capped at the CPUs)
    max_answer_chars: int = 1000  # in [1, 1e7]: a longer extracted answer is `too_long` (wrong) without parsing
    memory_limit_mb: int = 4096  # in [0, 2^30]: how much a verifier may grow (address space, Linux); 0: no limit

    def __post_init__(self):
        for f in fields(self):
            value, (lo, hi) = getattr(self, f.name), _RANGES.get(f.name, (-math.inf, math.inf))
            if value is None and f.name == "no_answer_score":
                continue
            try:
                x = math.nan if isinstance(value, bool) else float(value)
            except (TypeError, ValueError):
                x = math.nan
            integer, open_low = f.type == "int", f.name in ("timeout", "kill_grace")
            in_range = math.isfinite(x) and (x > lo if open_low else x >= lo) and x <= hi
            if not in_range or (integer and not x.is_integer()):
                span = "" if lo == -math.inf else f" in {'(' if open_low else '['}{lo:g}, {hi:g}]"
                kind = "an integer" if integer else "a finite number"
                raise ValueError(f"reward_kwargs.{f.name} must be {kind}{span}, got {value!r}")
            object.__setattr__(self, f.name, int(x) if integer else x)

    def score_of(self, verdict: str) -> float:
        if verdict == "no_answer" and self.no_answer_score is not None:
            return self.no_answer_score
        return self.correct_score if verdict == "correct" else self.wrong_score


_OPTION_KEYS = frozenset(f.name for f in fields(RewardOptions))


def is_correct(result: Any) -> bool:
    """Whether a scorer's result means a correct answer, as training reads it: a dict's `acc` when it has a
    non-null one (what `compute_score` returns), else its `score` > 0; a bare number > 0. Anything else
    (None, a dict with neither, a non-number score) is a ValueError naming the result: a broken scorer, not
    a wrong answer."""
    value = result
    if isinstance(result, dict):
        if result.get("acc") is not None:
            return bool(result["acc"])
        value = result.get("score")
    if isinstance(value, bool):
        return value
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"a scorer result needs 'acc' or a numeric 'score' (or is a number), got {result!r}") from None
    if math.isnan(x):
        raise ValueError(f"a scorer result's score is NaN: {result!r}")
    return x > 0.0


_warned_unknown: set = set()
_stats_lock = threading.Lock()
_stats = {v: 0 for v in VERDICTS}


def _options(kwargs: dict) -> RewardOptions:
    unknown = set(kwargs) - _OPTION_KEYS - _VERL_EXTRA_KWARGS - _warned_unknown
    if unknown:
        _warned_unknown.update(unknown)
        logger.warning("verl_ebpo.rewards.compute_score: ignoring unknown keyword argument(s) %s; options are %s",
                       sorted(unknown), sorted(_OPTION_KEYS))
    return RewardOptions(**{k: v for k, v in kwargs.items() if k in _OPTION_KEYS})


def _for_log(text: str) -> str:
    return text if len(text) <= 200 else text[:197] + "..."


def gold_inputs(ground_truth: Any) -> list[str]:
    """The verifier inputs of a data row's ground truth(s). ValueError (naming the row's value) for a ground
    truth that is unusable, or empty once normalised (`$$`, `\\,`, `.`, `Answer:`, `\\boxed{}`): graded, any
    answer with nothing in it would match it (a reward hack)."""
    out = [verifier_input(gold) for gold in ground_truth_texts(ground_truth)]  # a dataset error raises ValueError
    if EMPTY_INPUT in out:
        raise ValueError(f"ground_truth is empty after normalisation: {_for_log(repr(ground_truth))}")
    return out


def verdict_of(solution_str: Any, ground_truth: Any, options: Optional[RewardOptions] = None) -> tuple[str, str]:
    """(verdict, extracted answer) for one output. Verdicts: see VERDICTS.

    Everything that reads the model output (extraction, normalisation, math-verify) runs in a verifier process
    under the job's time bound (`timeout + kill_grace`): here only the ground truth is read and the output is
    coerced to text (`to_text`: C-speed str operations)."""
    opts, golds, text = options or RewardOptions(), gold_inputs(ground_truth), to_text(solution_str)
    if not text:
        return "no_answer", ""
    return get_pool(opts.processes, opts.memory_limit_mb).score_output(golds, text, opts.max_answer_chars, opts.timeout,
                                                                       opts.kill_grace)


def compute_score(data_source: Any = None, solution_str: Any = None, ground_truth: Any = None, extra_info: Any = None,
                  **kwargs: Any) -> dict:
    """verl's custom reward function: `{"score": float, "acc": bool, "pred": str, "verdict": str}`.

    Never raises on model output (`solution_str`); a timeout or a verifier crash counts as wrong.
    Raises ValueError for an unusable `ground_truth` or option, and `VerifierUnavailable` if no verifier
    process can be started at all (e.g. math-verify missing).
    """
    opts = _options(kwargs)
    verdict, pred = verdict_of(solution_str, ground_truth, opts)
    with _stats_lock:
        _stats[verdict] += 1
    return {"score": float(opts.score_of(verdict)), "acc": verdict == "correct", "pred": _for_log(pred),
            "verdict": verdict}


def stats() -> dict:
    """Counts of this process: verdicts so far, and the verifier processes started/killed/crashed/recycled."""
    with _stats_lock:
        out = dict(_stats)
    pool = current_pool()
    out.update({f"verifier_{k}": v for k, v in (pool.counters if pool else {}).items()})
    return out
