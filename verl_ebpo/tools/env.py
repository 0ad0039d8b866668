"""Every environment variable the tools read, in one table (`VARIABLES`), parsed by `read(name)`.

A value that is unset or empty is the default; any other value is parsed and range-checked, and a refused one
raises `EnvVarError` naming the variable, what it accepts and what it got (`=abc`, `=nan`, `=-1`: never silently
the default). Variables verl, Ray, vLLM or Hugging Face read themselves are theirs, not listed here; the plugin
(`verl_ebpo/` outside `tools/`) reads none. docs/cpu_backend.md#environment-variables lists the table.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping, Optional


class EnvVarError(ValueError):
    """An environment variable holds a value its table entry refuses."""


@dataclass(frozen=True)
class Variable:
    kind: type  # float, int or str
    default: Any
    doc: str
    low: Optional[float] = None  # numbers: the accepted range, [low, high] ((low, high] when low_open)
    high: Optional[float] = None
    low_open: bool = False
    choices: tuple[str, ...] = ()  # strings: the accepted values

    def accepts(self) -> str:
        if self.choices:
            return "one of " + ", ".join(self.choices)
        noun = "an integer" if self.kind is int else "a number"
        return f"{noun} in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}]"


VARIABLES: dict[str, Variable] = {
    "VERL_EBPO_HUB_TIMEOUT_S": Variable(
        float, 10.0, "seconds `verl-ebpo preflight` waits for a model's config.json from the Hub (0: never asks)", 0, 120),
    "VERL_EBPO_HF_BATCH_WINDOW_S": Variable(
        float, 0.02, "seconds the CPU `hf` rollout server gathers requests before sampling them as one batch", 0, 10),
    "VERL_EBPO_CPU_ROLLOUT": Variable(
        str, "hf", "the CPU backend's rollout (set by `CPURun`): `vllm` patches verl's vLLM rollout in every process",
        choices=("hf", "vllm")),
    "VERL_EBPO_VLLM_SYNC_TIMEOUT_S": Variable(
        float, 20.0, "seconds verl's weight sender waits for the vLLM worker on CPU before the run fails", 0, 3600,
        low_open=True),
    "VERL_EBPO_VLLM_BREAK_SYNC": Variable(
        str, "0", "`1`: leave vLLM-CPU's weight repacking in place, so the weight sync fails (its test)",
        choices=("0", "1")),
    "SMOKE_STEPS": Variable(int, 2, "training steps of `SMOKE=cpu` (a resume trains up to this step)", 1, 1000),
    "SMOKE_ROLLOUT": Variable(
        str, "hf", "the rollout of `SMOKE=cpu`: `vllm` keeps the recipe's (vllm-cpu's venv)", choices=("hf", "vllm")),
}


def read(name: str, env: Optional[Mapping[str, str]] = None) -> Any:
    """`name`'s value in `env` (default `os.environ`) as its table entry's type; EnvVarError when refused."""
    var = VARIABLES[name]
    raw = (os.environ if env is None else env).get(name, "").strip()
    if not raw:
        return var.default
    try:
        value = var.kind(raw)
    except ValueError:
        value = None
    if var.choices:
        ok = value in var.choices
    else:  # nan and inf fail the comparisons
        ok = value is not None and var.low <= value <= var.high and not (var.low_open and value == var.low)
    if not ok:
        raise EnvVarError(f"{name} must be {var.accepts()}, got {raw!r}")
    return value
