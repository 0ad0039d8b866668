"""EBPO's options, read from `config.ebpo` of verl's `algorithm` config.

On the command line: `+algorithm.ebpo.KEY=VALUE` (the `+` because verl's schema has no `ebpo` node).

| key                  | default  | effect |
|----------------------|----------|--------|
| prior_scope          | running  | `running`: the prior accumulates over the whole run (the paper). `batch`: reset before every call, so the prior is the current batch only (the authors' public code). |
| prior_decay          | 1.0      | lam in (0, 1]: the accumulators' weight and M2 are multiplied by lam before each merge. 1 is plain Welford. |
| normalize            | batch    | `batch`: (raw - mean) / (std + epsilon) over the batch's valid rows (the paper). `center`: raw - mean. `none`: raw. Default is `center` when `algorithm.norm_adv_by_std_in_grpo=false`. |
| epsilon              | 1e-6     | S = 1 when sigma2/G + tau2 <= epsilon; added to the std in `batch` normalization. |
| on_nonfinite         | error    | `error`: a NaN/inf score raises ValueError and the prior is left untouched. `skip`: those rows are treated as padding (advantage 0, no statistic) and counted in `ebpo/skipped_rows`. |
| allow_missing_state  | false    | On resume, a checkpoint without a saved prior starts a fresh prior with a warning instead of an error. |
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from verl_ebpo.advantage.math import NORMALIZE_MODES

PRIOR_SCOPES = ("running", "batch")
NONFINITE_POLICIES = ("error", "skip")


def _bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ValueError(f"ebpo.{key} must be true or false, got {value!r}")


def _float(key: str, value: Any, lo: float, hi: float, lo_open: bool) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"ebpo.{key} must be a number, got {value!r}") from None
    below = x <= lo if lo_open else x < lo
    if not math.isfinite(x) or below or x > hi:
        interval = f"{'(' if lo_open else '['}{lo}, {hi}]"
        raise ValueError(f"ebpo.{key} must be in {interval}, got {value!r}")
    return x


def _choice(key: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ValueError(f"ebpo.{key} must be one of {list(choices)}, got {value!r}")
    return value


@dataclass(frozen=True)
class EBPOOptions:
    prior_scope: str = "running"
    prior_decay: float = 1.0
    normalize: str = "batch"
    epsilon: float = 1e-6
    on_nonfinite: str = "error"
    allow_missing_state: bool = False

    def __post_init__(self):
        _choice("prior_scope", self.prior_scope, PRIOR_SCOPES)
        _float("prior_decay", self.prior_decay, 0.0, 1.0, lo_open=True)
        _choice("normalize", self.normalize, NORMALIZE_MODES)
        _float("epsilon", self.epsilon, 0.0, 1.0, lo_open=False)
        _choice("on_nonfinite", self.on_nonfinite, NONFINITE_POLICIES)

    def prior_shaping(self) -> dict:
        """The options that shape the accumulated prior (saved with it, compared on resume)."""
        return {"prior_scope": self.prior_scope, "prior_decay": self.prior_decay}

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_algorithm_config(cls, config: Any) -> "EBPOOptions":
        """Read `config.ebpo` (DictConfig, dict, verl's AlgoConfig or None).

        Unknown keys and bad values raise ValueError naming the key and what it accepts.
        """
        if config is None:
            return cls()
        getter = config.get if hasattr(config, "get") else lambda k, d=None: getattr(config, k, d)
        raw = getter("ebpo", None) or {}
        if hasattr(raw, "items"):
            raw = dict(raw.items())
        else:
            raise ValueError(f"algorithm.ebpo must be a mapping of options, got {type(raw).__name__}")
        known = {f: None for f in cls.__dataclass_fields__}
        unknown = sorted(set(raw) - set(known))
        if unknown:
            raise ValueError(f"unknown ebpo option(s) {unknown}; known options: {sorted(known)}")
        values: dict[str, Any] = {}
        if "normalize" not in raw and getter("norm_adv_by_std_in_grpo", True) is False:
            values["normalize"] = "center"
        for key, value in raw.items():
            if value is None:
                continue
            if key in ("prior_decay", "epsilon"):
                values[key] = float(value) if isinstance(value, (int, float)) else _float(key, value, 0, 1, False)
            elif key == "allow_missing_state":
                values[key] = _bool(key, value)
            else:
                values[key] = value
        return cls(**values)
