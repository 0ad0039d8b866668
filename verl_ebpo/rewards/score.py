"""`compute_score`: the math reward verl loads with

    reward.custom_reward_function.path=pkg://verl_ebpo.rewards
    reward.custom_reward_function.name=compute_score

Options come as keyword arguments (`+reward.custom_reward_function.reward_kwargs.KEY=VALUE`), declared once in
`RewardOptions`. `is_correct` turns any scorer's result into the verdict training uses (labelling and evaluation
tools call it too).
"""

import math
import warnings
from dataclasses import dataclass, fields
from typing import Any

from verl_ebpo.rewards.extract import ground_truth_texts, to_text
from verl_ebpo.rewards.normalize import EMPTY_INPUT, verifier_input
from verl_ebpo.rewards.pool import get_pool

# Keyword arguments verl's reward managers pass that this scorer has no use for.
_VERL_EXTRA_KWARGS = frozenset({"reward_router_address", "reward_model_tokenizer"})
_UPPER = {"timeout": 3600, "kill_grace": 600, "processes": 256}  # these are in (0, upper]


@dataclass
class RewardOptions:
    """A verdict is one of: correct, wrong, no_answer, timeout (the verifier ran out of time), error (it died)."""

    correct_score: float = 1.0  # score of a correct answer
    wrong_score: float = 0.0  # score of a wrong answer, a timeout or an error; -1 for DAPO's ±1
    no_answer_score: float | None = None  # score when no answer can be extracted (format penalty); None: wrong_score
    timeout: float = 3.0  # in (0, 3600]: wall-clock seconds of verifier time per answer; past it the answer is wrong
    kill_grace: float = 2.0  # in (0, 600]: extra seconds before a verifier that ignores its timeout is killed
    processes: int = 2  # in [1, 256]: verifiers of this process's one pool (the largest asked, capped at the CPUs)

    def __post_init__(self):
        for f in fields(self):
            value, upper, integer = getattr(self, f.name), _UPPER.get(f.name), f.type is int
            if value is None and f.name == "no_answer_score":
                continue
            try:
                x = math.nan if isinstance(value, bool) else float(value)
            except (TypeError, ValueError):
                x = math.nan
            if not math.isfinite(x) or (upper and not 0 < x <= upper) or (integer and not x.is_integer()):
                what = ("an integer" if integer else "a number") + f" in (0, {upper}]" if upper else "a finite number"
                raise ValueError(f"reward_kwargs.{f.name} must be {what}, got {value!r}")
            setattr(self, f.name, int(x) if integer else x)


_OPTION_KEYS = frozenset(f.name for f in fields(RewardOptions))


def is_correct(result: Any) -> bool:
    """Whether a scorer's result means a correct answer, as training reads it: a dict's `acc` when it has a
    non-null one (what `compute_score` returns), else its `score` > 0; a bare number > 0. Anything else
    (None, a dict with neither, a non-number or NaN score) is a ValueError naming the result: a broken scorer,
    not a wrong answer."""
    if isinstance(result, dict) and result.get("acc") is not None:
        return bool(result["acc"])
    try:
        x = float(result.get("score") if isinstance(result, dict) else result)
    except (TypeError, ValueError):
        x = math.nan
    if math.isnan(x):
        raise ValueError(f"a scorer result needs 'acc' or a numeric 'score' (or is a number), got {result!r}")
    return x > 0.0


def _options(kwargs: dict) -> RewardOptions:
    unknown = set(kwargs) - _OPTION_KEYS - _VERL_EXTRA_KWARGS
    if unknown:  # a Python warning: shown once per process and set of keys
        warnings.warn(f"verl_ebpo.rewards.compute_score: ignoring unknown keyword argument(s) {sorted(unknown)}; "
                      f"options are {sorted(_OPTION_KEYS)}", stacklevel=3)
    return RewardOptions(**{k: v for k, v in kwargs.items() if k in _OPTION_KEYS})


def _for_log(text: str) -> str:
    return text if len(text) <= 200 else text[:197] + "..."


def verdict_of(solution_str: Any, ground_truth: Any, options: RewardOptions | None = None) -> tuple[str, str]:
    """(verdict, extracted answer) for one output (verdicts: see RewardOptions).

    Everything that reads the model output (extraction, normalisation, math-verify) runs in a verifier process
    under the job's time bound (`timeout + kill_grace`): here only the ground truth is read (ValueError, naming
    the row's value, for one that is unusable or empty once normalised, `$$`, `\\,`, `.`, `Answer:`, `\\boxed{}`:
    graded, any answer with nothing in it would match it, a reward hack) and the output is coerced to text
    (`to_text`: C-speed str operations)."""
    opts, text = options or RewardOptions(), to_text(solution_str)
    golds = [verifier_input(gold) for gold in ground_truth_texts(ground_truth)]  # a dataset error: ValueError
    if EMPTY_INPUT in golds:
        raise ValueError(f"ground_truth is empty after normalisation: {_for_log(repr(ground_truth))}")
    if not text:
        return "no_answer", ""
    return get_pool(opts.processes).score_output(golds, text, opts.timeout, opts.kill_grace)


def compute_score(data_source: Any = None, solution_str: Any = None, ground_truth: Any = None, extra_info: Any = None,
                  **kwargs: Any) -> dict:
    """verl's custom reward function: `{"score": float, "acc": bool, "pred": str, "verdict": str}`.

    Never raises on model output (`solution_str`); a timeout or a verifier crash counts as wrong.
    Raises ValueError for an unusable `ground_truth` or option, and `VerifierUnavailable` if no verifier
    process can be started at all (e.g. math-verify missing).
    """
    opts = _options(kwargs)
    verdict, pred = verdict_of(solution_str, ground_truth, opts)
    no_answer = verdict == "no_answer" and opts.no_answer_score is not None
    score = opts.correct_score if verdict == "correct" else opts.no_answer_score if no_answer else opts.wrong_score
    return {"score": float(score), "acc": verdict == "correct", "pred": _for_log(pred), "verdict": verdict}
