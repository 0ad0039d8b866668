"""`load_scorer("module:function")`: the one loader of a scorer (a verl reward function), used by
`verl-ebpo label-difficulty`, `verl-ebpo compare` and recipes/eval/score.py."""

from __future__ import annotations

import importlib
from typing import Any, Callable


class ScorerError(ValueError):
    """A scorer spec that cannot be loaded (the message names it)."""


def load_scorer(spec: str | None) -> Callable[..., Any]:
    """`module:function` (default verl_ebpo.rewards:compute_score), imported now: the one scorer loader of the
    labelling tools and recipes/eval/score.py. Any failure (a malformed spec, a module that is missing or raises
    while importing, a missing or non-callable attribute) is a one-line ScorerError naming the spec."""
    spec = spec or "verl_ebpo.rewards:compute_score"
    mod, sep, name = spec.partition(":")
    if not sep or not mod.strip() or not name.strip():
        raise ScorerError(f"--scorer must look like module:function, got {spec!r}")  # both callers take --scorer
    try:
        module = importlib.import_module(mod)
    except Exception as e:  # noqa: BLE001 - a scorer module that fails to import is a set-up error, said in one line
        why = " ".join(str(e).split())[:200]
        raise ScorerError(f"cannot load scorer {spec!r}: importing {mod!r} failed ({type(e).__name__}: {why})") from None
    if not hasattr(module, name):
        raise ScorerError(f"cannot load scorer {spec!r}: module {mod!r} has no attribute {name!r}")
    fn = getattr(module, name)
    if not callable(fn):
        raise ScorerError(f"scorer {spec!r} is not callable (it is a {type(fn).__name__})")
    return fn


def sized_for(scorer: Callable[..., Any], workers: int) -> Callable[..., Any]:
    """The scorer with its verifier pool sized for `workers` calling threads: this package's `compute_score` (or a
    scorer whose signature names `processes`) gets `processes=min(workers, 256)` unless a call gives its own; the
    pool itself caps that at the CPUs (docs/reward.md). Any other scorer is returned unchanged. Used by every
    `--workers` option that scores answers (label-difficulty, recipes/eval/score.py)."""
    import functools
    import inspect

    from verl_ebpo.rewards.score import compute_score

    if scorer is not compute_score:
        try:
            if "processes" not in inspect.signature(scorer).parameters:
                return scorer
        except (TypeError, ValueError):  # no signature (a builtin): leave it alone
            return scorer
    processes = max(1, min(int(workers), 256))

    @functools.wraps(scorer)
    def sized(*args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("processes", processes)
        return scorer(*args, **kwargs)

    return sized
