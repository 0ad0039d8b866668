"""The EBPO prior: two Welford accumulators as one explicit, checkpointable object.

W_r  accumulates every valid score r_i -> mu_glob = mean, sigma2 = m2 / weight
W_mu accumulates every group mean m_q  -> tau2 = m2 / weight

The advantage runs in one process (verl's TaskRunner / driver), so there is one prior per process:
`get_prior()` reaches it, `reset_prior()` empties it. The checkpoint callback saves and restores it.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field

import torch

from verl_ebpo.advantage.math import Moments, merge_moments, shrinkage
from verl_ebpo.files import atomic_write_text

SCHEMA = "verl_ebpo.prior"
SCHEMA_VERSION = 1


@dataclass
class EBPOPrior:
    reward: Moments = field(default_factory=Moments)  # W_r
    group_mean: Moments = field(default_factory=Moments)  # W_mu
    updates: int = 0  # number of calls that merged at least one valid row
    shaping: dict | None = None  # options that shaped the accumulated statistics (prior_scope, prior_decay)

    # -- statistics -------------------------------------------------------------------------------
    @property
    def mu_glob(self) -> float:
        return self.reward.mean

    @property
    def sigma2(self) -> float:
        return self.reward.variance

    @property
    def tau2(self) -> float:
        return self.group_mean.variance

    def shrinkage_for(self, group_size: float, epsilon: float = 1e-6) -> float:
        """S for a group of `group_size` answers under the current statistics."""
        count = torch.tensor([float(group_size)], dtype=torch.float64)
        return float(shrinkage(count, self.sigma2, self.tau2, epsilon))

    # -- updates ----------------------------------------------------------------------------------
    def merged(self, reward_batch: Moments, group_mean_batch: Moments, decay: float) -> "EBPOPrior":
        """A new prior with one call's moments merged in (self is not modified)."""
        if reward_batch.weight <= 0:
            return self
        return EBPOPrior(
            reward=merge_moments(self.reward, reward_batch, decay),
            group_mean=merge_moments(self.group_mean, group_mean_batch, decay),
            updates=self.updates + 1,
            shaping=self.shaping,
        )

    def assign(self, other: "EBPOPrior") -> None:
        """Replace this object's state in place (so references held elsewhere see the update)."""
        self.reward, self.group_mean = other.reward, other.group_mean
        self.updates, self.shaping = other.updates, other.shaping

    def reset(self) -> None:
        self.assign(EBPOPrior())

    # -- persistence ------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Plain JSON-able dict; floats round-trip exactly through json (repr)."""
        return {
            "schema": SCHEMA,
            "version": SCHEMA_VERSION,
            "reward": {"weight": self.reward.weight, "mean": self.reward.mean, "m2": self.reward.m2},
            "group_mean": {
                "weight": self.group_mean.weight,
                "mean": self.group_mean.mean,
                "m2": self.group_mean.m2,
            },
            "updates": self.updates,
            "shaping": dict(self.shaping) if self.shaping else None,
        }

    def load_state_dict(self, state: dict) -> None:
        """Load a dict made by `state_dict()`. Raises ValueError on a wrong schema/version or bad values."""
        if not isinstance(state, dict) or state.get("schema") != SCHEMA:
            raise ValueError(f"not an EBPO prior state (schema {SCHEMA!r} expected)")
        if state.get("version") != SCHEMA_VERSION:
            raise ValueError(
                f"EBPO prior state version {state.get('version')!r} is not supported (expected {SCHEMA_VERSION})"
            )
        try:
            acc = {}
            for name in ("reward", "group_mean"):
                d = state[name]
                m = Moments(float(d["weight"]), float(d["mean"]), float(d["m2"]))
                if not all(math.isfinite(x) for x in (m.weight, m.mean, m.m2)) or m.weight < 0 or m.m2 < 0:
                    raise ValueError(f"{name} has invalid moments {d}")
                acc[name] = m
            updates = int(state["updates"])
        except (KeyError, TypeError) as e:
            raise ValueError(f"EBPO prior state is missing or has a malformed field: {e}") from None
        self.assign(EBPOPrior(acc["reward"], acc["group_mean"], updates, state.get("shaping")))

    def save(self, path: str | os.PathLike, **extra) -> None:
        """Write state_dict() (plus `extra` top-level keys, e.g. global_step) as JSON, atomically."""
        atomic_write_text(path, json.dumps({**self.state_dict(), **extra}, indent=2, sort_keys=True) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike) -> "EBPOPrior":
        """Read a file written by `save`. Raises ValueError naming the file when it is unreadable."""
        try:
            with open(path, encoding="utf-8") as f:
                state = json.load(f)
            prior = cls()
            prior.load_state_dict(state)
        except (OSError, ValueError) as e:
            raise ValueError(f"cannot load EBPO prior from {os.fspath(path)}: {e}") from e
        return prior


_PRIOR = EBPOPrior()


def get_prior() -> EBPOPrior:
    """The process-wide prior used by `adv_estimator=ebpo` (same object for the life of the process)."""
    return _PRIOR


def reset_prior() -> None:
    """Empty the process-wide prior (e.g. between independent runs in one process)."""
    _PRIOR.reset()
