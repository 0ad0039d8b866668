"""EBPO's options, read from `config.ebpo` of verl's `algorithm` config.

On the command line: `+algorithm.ebpo.KEY=VALUE` (the `+` because verl's schema has no `ebpo` node).
The table of keys, defaults and effects is `EBPOOptions.markdown_table()`, shown in the README.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from verl_ebpo.advantage.core import NORMALIZE_MODES
from verl_ebpo.spec import Spec, config_get, option

ESTIMATOR_NAME = "ebpo"  # algorithm.adv_estimator=ebpo: the name registered in verl and checked by the callback


@dataclass(frozen=True)
class EBPOOptions(Spec):
    PREFIX = "algorithm.ebpo"

    prior_scope: str = option(
        "running",
        choices=("running", "batch"),
        doc="`running`: statistics accumulate over the whole run (the paper). `batch`: reset every call, so the "
        "prior is the current batch only (what the authors' public code does).",
    )
    prior_decay: float = option(
        1.0,
        number=(0.0, 1.0),
        lo_open=True,
        doc="λ in (0, 1]: both accumulators' weight and M2 are multiplied by λ before each merge (λ = 1 is plain "
        "Welford; λ < 1 forgets with a horizon of about 1/(1-λ) steps).",
    )
    normalize: str = option(
        "batch",
        choices=NORMALIZE_MODES,
        doc="`batch`: `(raw - mean) / (std + eps)` (the paper); `center`: `raw - mean` (the default when "
        "`algorithm.norm_adv_by_std_in_grpo=false`, as in the authors' code); `none`: `raw`. Fewer than two "
        "valid rows give 0 for `batch`/`center`.",
    )
    epsilon: float = option(
        1e-6,
        number=(0.0, 1.0),
        lo_open=True,
        doc="in (0, 1]: S = 1 when `sigma2/G + tau2 <= epsilon·(sigma2+tau2)`; `batch` divides by `std + epsilon·max(abs(raw - mean))`. Both unit-free.",
    )
    on_nonfinite: str = option(
        "error",
        choices=("error", "skip"),
        doc="a NaN/inf score, or one whose absolute value exceeds 1e100 (beyond what the prior's float64 moments hold): `error` "
        "raises `ValueError` with the row count and leaves the prior exactly as it was; `skip` treats those rows "
        "as padding and counts them in `ebpo/skipped_rows`.",
    )
    allow_missing_state: bool = option(
        False,
        doc="on resume, start a fresh prior (with a warning) when the checkpoint holds none "
        "([docs/checkpoint.md](docs/checkpoint.md)).",
    )

    def prior_shaping(self) -> dict:
        """The options that shape the accumulated prior (saved with it, compared on resume)."""
        return {"prior_scope": self.prior_scope, "prior_decay": self.prior_decay}

    @classmethod
    def from_algorithm_config(cls, config: Any) -> "EBPOOptions":
        """Read `config.ebpo` (DictConfig, dict, verl's AlgoConfig or None).

        Unknown keys and bad values raise ValueError naming the key and what it accepts.
        """
        if config is None:
            return cls()
        defaults = {}
        if config_get(config, "norm_adv_by_std_in_grpo", True) is False:
            defaults["normalize"] = "center"
        return cls.from_mapping(config_get(config, "ebpo"), **defaults)
