"""`compute_score`: the math reward verl loads with

    reward.custom_reward_function.path=pkg://verl_ebpo.rewards
    reward.custom_reward_function.name=compute_score

Options come as keyword arguments, i.e. `+reward.custom_reward_function.reward_kwargs.KEY=VALUE`:

| key              | default | effect |
|------------------|---------|--------|
| correct_score    | 1.0     | score of a correct answer |
| wrong_score      | 0.0     | score of a wrong answer, a timeout, a too-long answer or a verifier error (DAPO: -1) |
| no_answer_score  | None    | score when no answer can be extracted (a format penalty); None: `wrong_score` |
| timeout          | 3.0     | seconds of verifier time per answer; past it the answer is wrong |
| kill_grace       | 2.0     | extra seconds before a verifier process that ignores the timeout is killed |
| processes        | 2       | verifier processes per calling process (each verl reward worker has its own) |
| max_answer_chars | 1000    | a longer extracted answer is wrong without being parsed |
| memory_limit_mb  | 4096    | how far a verifier process may grow (address space, MiB; Linux; 0: no limit) |
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass
from typing import Any, Optional

from verl_ebpo.rewards.extract import extract_answer, ground_truth_texts
from verl_ebpo.rewards.pool import current_pool, get_pool

logger = logging.getLogger(__name__)

VERDICTS = ("correct", "wrong", "no_answer", "too_long", "timeout", "error")
PRED_LOG_CHARS = 200
# Keyword arguments verl's reward managers pass that this scorer has no use for.
_VERL_EXTRA_KWARGS = frozenset({"reward_router_address", "reward_model_tokenizer"})


@dataclass(frozen=True)
class RewardOptions:
    correct_score: float = 1.0
    wrong_score: float = 0.0
    no_answer_score: Optional[float] = None
    timeout: float = 3.0
    kill_grace: float = 2.0
    processes: int = 2
    max_answer_chars: int = 1000
    memory_limit_mb: int = 4096

    def __post_init__(self):
        for key in ("correct_score", "wrong_score", "no_answer_score"):
            value = getattr(self, key)
            if value is None and key == "no_answer_score":
                continue
            object.__setattr__(self, key, _finite(key, value))
        object.__setattr__(self, "timeout", _positive(key="timeout", value=self.timeout))
        object.__setattr__(self, "kill_grace", _positive(key="kill_grace", value=self.kill_grace))
        object.__setattr__(self, "processes", _int(key="processes", value=self.processes, lo=1))
        object.__setattr__(self, "max_answer_chars", _int(key="max_answer_chars", value=self.max_answer_chars, lo=1))
        object.__setattr__(self, "memory_limit_mb", _int(key="memory_limit_mb", value=self.memory_limit_mb, lo=0))

    def score_of(self, verdict: str) -> float:
        if verdict == "correct":
            return self.correct_score
        if verdict == "no_answer" and self.no_answer_score is not None:
            return self.no_answer_score
        return self.wrong_score


_OPTION_KEYS = frozenset(RewardOptions.__dataclass_fields__)


def _finite(key: str, value: Any) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"reward_kwargs.{key} must be a number, got {value!r}") from None
    if not math.isfinite(x):
        raise ValueError(f"reward_kwargs.{key} must be finite, got {value!r}")
    return x


def _positive(key: str, value: Any) -> float:
    x = _finite(key, value)
    if x <= 0:
        raise ValueError(f"reward_kwargs.{key} must be > 0 seconds, got {value!r}")
    return x


def _int(key: str, value: Any, lo: int) -> int:
    if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, float) and value.is_integer())):
        try:
            value = int(str(value))
        except ValueError:
            raise ValueError(f"reward_kwargs.{key} must be an integer, got {value!r}") from None
    if int(value) < lo:
        raise ValueError(f"reward_kwargs.{key} must be >= {lo}, got {value!r}")
    return int(value)


_options_cache: dict = {}
_warned_unknown: set = set()
_stats_lock = threading.Lock()
_stats = {v: 0 for v in VERDICTS}


def _options(kwargs: dict) -> RewardOptions:
    given = {k: v for k, v in kwargs.items() if k in _OPTION_KEYS}
    unknown = set(kwargs) - _OPTION_KEYS - _VERL_EXTRA_KWARGS - _warned_unknown
    if unknown:
        _warned_unknown.update(unknown)
        logger.warning(
            "verl_ebpo.rewards.compute_score: ignoring unknown keyword argument(s) %s; options are %s",
            sorted(unknown),
            sorted(_OPTION_KEYS),
        )
    try:
        key = tuple(sorted(given.items()))
        hash(key)
    except TypeError:
        return RewardOptions(**given)
    opts = _options_cache.get(key)
    if opts is None:
        opts = RewardOptions(**given)
        if len(_options_cache) < 64:
            _options_cache[key] = opts
    return opts


def _for_log(text: str) -> str:
    return text if len(text) <= PRED_LOG_CHARS else text[: PRED_LOG_CHARS - 3] + "..."


def judge(solution_str: Any, ground_truth: Any, options: Optional[RewardOptions] = None) -> tuple[str, str]:
    """(verdict, extracted answer) for one output. Verdicts: see VERDICTS."""
    opts = options or RewardOptions()
    golds = ground_truth_texts(ground_truth)  # a dataset error raises ValueError
    try:
        extracted = extract_answer(solution_str)
    except Exception:  # pragma: no cover - extraction is pure string code; never let model output raise
        logger.exception("verl_ebpo.rewards: answer extraction failed (counted as an error)")
        return "error", ""
    if extracted is None:
        return "no_answer", ""
    text = extracted.text
    if len(text) > opts.max_answer_chars:
        return "too_long", text
    if text in golds:  # the very same string: no need to ask math-verify
        return "correct", text
    pool = get_pool(opts.processes, opts.memory_limit_mb)
    return pool.run(golds, text, extracted.kind, opts.timeout, opts.kill_grace), text


def compute_score(
    data_source: Any = None,
    solution_str: Any = None,
    ground_truth: Any = None,
    extra_info: Any = None,
    **kwargs: Any,
) -> dict:
    """verl's custom reward function: `{"score": float, "acc": bool, "pred": str, "verdict": str}`.

    Never raises on model output (`solution_str`); a timeout or a verifier crash counts as wrong.
    Raises ValueError for an unusable `ground_truth` or option, and `VerifierUnavailable` if no verifier
    process can be started at all (e.g. math-verify missing).
    """
    opts = _options(kwargs)
    verdict, pred = judge(solution_str, ground_truth, opts)
    with _stats_lock:
        _stats[verdict] += 1
    return {
        "score": float(opts.score_of(verdict)),
        "acc": verdict == "correct",
        "pred": _for_log(pred),
        "verdict": verdict,
    }


def stats() -> dict:
    """Counts of this process: verdicts so far, and the verifier processes started/killed/crashed/recycled."""
    with _stats_lock:
        out = dict(_stats)
    pool = current_pool()
    out.update({f"verifier_{k}": v for k, v in (pool.counters if pool else {}).items()})
    return out
