"""The EBPO prior: two Welford accumulators as one explicit, checkpointable object.

W_r  accumulates every valid score r_i -> mu_glob = mean, sigma2 = m2 / weight
W_mu accumulates every group mean m_q  -> tau2 = m2 / weight

The advantage runs in one process (verl's TaskRunner / driver), so verl's registered estimator uses one prior per
process: `get_prior()` reaches it, `reset_prior()` empties it. The checkpoint callback saves and restores it.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field

import torch

from verl_ebpo.advantage.core import merge_moments, shrinkage

SCHEMA = "verl_ebpo.prior"
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Moments:
    """Weighted Welford moments of a set of observations: total weight, mean, sum of squared deviations."""

    weight: float = 0.0
    mean: float = 0.0
    m2: float = 0.0

    @property
    def variance(self) -> float:
        """Population variance m2 / weight (0 for an empty accumulator)."""
        return self.m2 / self.weight if self.weight > 0 else 0.0


@dataclass
class EBPOPrior:
    reward: Moments = field(default_factory=Moments)  # W_r
    group_mean: Moments = field(default_factory=Moments)  # W_mu
    updates: int = 0  # number of calls that merged at least one valid row

    mu_glob = property(lambda self: self.reward.mean, doc="running mean of all scores")
    sigma2 = property(lambda self: self.reward.variance, doc="running population variance of all scores")
    tau2 = property(lambda self: self.group_mean.variance, doc="running population variance of the group means")

    def shrinkage_for(self, group_size: float, epsilon: float = 1e-6) -> float:
        """S for a group of `group_size` answers under the current statistics."""
        return float(shrinkage(torch.tensor([float(group_size)], dtype=torch.float64), self.sigma2, self.tau2, epsilon))

    def merged(self, reward_batch: Moments, group_mean_batch: Moments, decay: float) -> "EBPOPrior":
        """A new prior with one call's moments (of its scores, of its group means) merged in by `merge_moments`;
        self unchanged."""
        if reward_batch.weight <= 0:
            return self
        moments = [[*m.__dict__.values()] for m in (self.reward, self.group_mean, reward_batch, group_mean_batch)]
        acc = torch.tensor(moments, dtype=torch.float64)
        reward, group_mean = merge_moments(acc[:2], acc[2:], decay).tolist()
        return EBPOPrior(Moments(*reward), Moments(*group_mean), self.updates + 1)

    def is_finite(self) -> bool:
        return all(math.isfinite(x) for m in (self.reward, self.group_mean) for x in m.__dict__.values())

    def assign(self, other: "EBPOPrior") -> None:
        """Replace this object's state in place (so references held elsewhere see the update)."""
        self.reward, self.group_mean, self.updates = other.reward, other.group_mean, other.updates

    def reset(self) -> None:
        self.assign(EBPOPrior())

    def state_dict(self) -> dict:
        """Plain JSON-able dict; floats round-trip exactly through json (repr)."""
        return {"schema": SCHEMA, "version": SCHEMA_VERSION, "reward": dict(self.reward.__dict__),
                "group_mean": dict(self.group_mean.__dict__), "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        """Load a dict made by `state_dict()`. ValueError (self unchanged) on another schema or version, a missing
        key, or a moment that is not a finite number (a negative weight or m2 included)."""
        if not isinstance(state, dict) or state.get("schema") != SCHEMA or state.get("version") != SCHEMA_VERSION:
            raise ValueError(f"not an EBPO prior state of schema {SCHEMA!r} version {SCHEMA_VERSION}")
        try:
            acc = [Moments(*(float(state[name][key]) for key in ("weight", "mean", "m2"))) for name in ("reward", "group_mean")]
            loaded = EBPOPrior(*acc, int(state["updates"]))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"malformed or missing field {e}") from None
        if not loaded.is_finite() or loaded.updates < 0 or any(m.weight < 0 or m.m2 < 0 for m in acc):
            raise ValueError(f"invalid moments (finite, weight and m2 >= 0, updates >= 0 expected): {state}")
        self.assign(loaded)

    def save(self, path: str | os.PathLike, **extra) -> None:
        """Write state_dict() (plus `extra` top-level keys, e.g. global_step) as JSON, atomically (temp file,
        os.replace). Refuses (ValueError naming the file) a non-finite prior."""
        if not self.is_finite():
            raise ValueError(f"refusing to save EBPO prior to {os.fspath(path)}: it holds a non-finite value")
        folder, name = os.path.split(os.fspath(path))
        tmp = os.path.join(folder, f".{name}.tmp-{os.getpid()}")  # a crash leaves the old file or the new one
        try:
            os.makedirs(folder or ".", exist_ok=True)
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(json.dumps({**self.state_dict(), **extra}, indent=2, sort_keys=True) + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError:  # disk full, no permission: the OS error names the (temporary) file; none is left
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise


PRIOR_FILENAME = "ebpo_prior.json"  # beside verl's checkpoint, in its global_step_N folder


class EBPOCheckpointError(ValueError):
    """A checkpoint's EBPO prior is missing, unreadable, or does not match the checkpoint."""


def read_prior_file(path: str | os.PathLike) -> tuple[EBPOPrior, int]:
    """(prior, global_step) of a file written by `EBPOPrior.save`; any defect -> EBPOCheckpointError naming it."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            state = json.loads(f.read().decode("utf-8"))
        prior = EBPOPrior()
        prior.load_state_dict(state)
        step = state["global_step"]
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"global_step must be a non-negative integer, got {step!r:.40}")
    except (OSError, ValueError, KeyError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise EBPOCheckpointError(f"EBPO prior file {path} is corrupt or unreadable: {e}") from None
    return prior, step


_PRIOR = EBPOPrior()


def get_prior() -> EBPOPrior:
    """The process-wide prior used by `adv_estimator=ebpo` (same object for the life of the process)."""
    return _PRIOR


def reset_prior() -> None:
    """Empty the process-wide prior (e.g. between independent runs in one process)."""
    _PRIOR.reset()
