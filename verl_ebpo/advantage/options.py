"""EBPO's options, read from `config.ebpo` of verl's `algorithm` config (`+algorithm.ebpo.KEY=VALUE` on the command
line: the `+` because verl's schema has no `ebpo` node). Each option is documented once, beside its field."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

NORMALIZE_MODES = ("batch", "center", "none")
ESTIMATOR_NAME = "ebpo"  # algorithm.adv_estimator=ebpo: the name registered in verl and checked by the callback


def config_get(node, key: str, default=None):
    """`node[key]` of a dict / DictConfig / verl dataclass config, or `default` (also when `node` is None)."""
    return default if node is None else node.get(key, default) if hasattr(node, "get") else getattr(node, key, default)


def as_number(value) -> float:
    """`value` as a float ("0.5", as a command line gives it, included); NaN for a bool or anything not a number."""
    try:
        return math.nan if isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        return math.nan


def from_mapping(cls, mapping=None, prefix: str = "", **defaults):
    """`cls(**mapping)` for a dict / DictConfig / None (a None value: the default; `defaults`: what the mapping's keys
    win over); an unknown key is a ValueError listing the known ones."""
    if mapping is not None and not hasattr(mapping, "items"):
        raise ValueError(f"{prefix or 'options'} must be a mapping of options, got {type(mapping).__name__}")
    raw, known = dict(mapping.items()) if mapping is not None else {}, [f.name for f in dataclasses.fields(cls)]
    if unknown := sorted(str(k) for k in raw if k not in known):
        raise ValueError(f"unknown {prefix + ' ' if prefix else ''}option(s) {unknown}; known options: {known}")
    return cls(**{**defaults, **{k: v for k, v in raw.items() if v is not None}})


@dataclass(frozen=True)
class EBPOOptions:
    prior_scope: str = field(default="running", metadata={"help": (
        "`running`: statistics accumulate over the whole run (the paper). `batch`: reset every call, so the prior is "
        "the current batch only (what the authors' public code does).")})
    prior_decay: float = field(default=1.0, metadata={"help": (
        "λ in (0, 1]: both accumulators' weight and M2 are multiplied by λ before each merge (λ = 1 is plain "
        "Welford; λ < 1 forgets with a horizon of about 1/(1-λ) steps).")})
    normalize: str = field(default="batch", metadata={"help": (
        "`batch`: `(raw - mean) / (std + eps)` (the paper); `center`: `raw - mean` (the default when "
        "`algorithm.norm_adv_by_std_in_grpo=false`, as in the authors' code); `none`: `raw`. Fewer than two "
        "valid rows give 0 for `batch`/`center`.")})
    epsilon: float = field(default=1e-6, metadata={"help": (
        "in (0, 1]: S = 1 when `sigma2/G + tau2 <= epsilon·(sigma2+tau2)`; `batch` divides by "
        "`std + epsilon·max(abs(raw - mean))`. Both unit-free.")})
    on_nonfinite: str = field(default="error", metadata={"help": (
        "a NaN/inf score, or one whose absolute value exceeds 1e100 (beyond what the prior's float64 moments hold): "
        "`error` raises `ValueError` with the row count and leaves the prior exactly as it was; `skip` treats those "
        "rows as padding and counts them in `ebpo/skipped_rows`.")})
    allow_missing_state: bool = field(default=False, metadata={"help": (
        "on resume, start a fresh prior (with a warning) when the checkpoint holds none "
        "([docs/checkpoint.md](docs/checkpoint.md)).")})

    def __post_init__(self):  # a command line may give "0.5" or "true": normalised here
        def refuse(key: str, wants: str):
            raise ValueError(f"algorithm.ebpo.{key} must be {wants}, got {getattr(self, key)!r}")

        for key, allowed in (("prior_scope", ("running", "batch")), ("normalize", NORMALIZE_MODES),
                             ("on_nonfinite", ("error", "skip"))):
            if getattr(self, key) not in allowed:
                refuse(key, f"one of {list(allowed)}")
        for key in ("prior_decay", "epsilon"):
            x = as_number(getattr(self, key))
            if not 0.0 < x <= 1.0:
                refuse(key, "a finite number in (0, 1]")
            object.__setattr__(self, key, x)
        if str(self.allow_missing_state).strip().lower() not in ("true", "false"):
            refuse("allow_missing_state", "true or false")
        object.__setattr__(self, "allow_missing_state", str(self.allow_missing_state).strip().lower() == "true")

    @classmethod
    def from_algorithm_config(cls, config) -> "EBPOOptions":
        """Read `config.ebpo` (DictConfig, dict, verl's AlgoConfig or None); `normalize` defaults to `center` when
        `norm_adv_by_std_in_grpo` is false."""
        center = config_get(config, "norm_adv_by_std_in_grpo", True) is False
        return from_mapping(cls, config_get(config, "ebpo"), "algorithm.ebpo", **({"normalize": "center"} if center else {}))

