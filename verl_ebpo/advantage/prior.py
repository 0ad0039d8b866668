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

from verl_ebpo.advantage.math import MAX_ABS_SCORE, Moments, merge_moments, shrinkage
from verl_ebpo.files import atomic_write_text, unreadable_reason

SCHEMA = "verl_ebpo.prior"
SCHEMA_VERSION = 1


class UnreadableStateFile(ValueError):
    """The path cannot be read as a state file at all (missing, a link loop, not a regular file)."""


def read_state_file(path: str | os.PathLike) -> dict:
    """The JSON value in `path`. Raises UnreadableStateFile (`verl_ebpo.files.unreadable_reason`: missing, a
    dangling link or a loop, not a regular file -- a stat before opening, so a FIFO never blocks) or ValueError
    (not UTF-8 JSON); the caller names the file."""
    path = os.fspath(path)
    why = unreadable_reason(path)
    if why:
        raise UnreadableStateFile(why)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise UnreadableStateFile(e.strerror or str(e)) from None
    try:
        return json.loads(data.decode("utf-8"))
    except RecursionError:  # stays: a hand-edited or foreign file must be one line, not a RecursionError traceback
        raise ValueError("it is JSON nested too deeply to be a prior state") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"it is not UTF-8 text ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"it is not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None


def _number(where: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where} must be a number, got {value!r:.80}")
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"{where} is out of range ({str(value)[:40]}...)") from None


def _check_shaping(shaping) -> dict | None:
    if shaping is None:
        return None
    if not isinstance(shaping, dict) or not all(
        isinstance(k, str) and (v is None or isinstance(v, (str, int, float, bool))) for k, v in shaping.items()
    ):
        raise ValueError(
            f"shaping must be null or an object of option values (e.g. {{\"prior_scope\": \"running\", "
            f"\"prior_decay\": 1.0}}), got {shaping!r:.80}"
        )
    return dict(shaping)


def _check_moments(name: str, m: Moments) -> None:
    """The invariants of one accumulator of scores bounded by MAX_ABS_SCORE (what the estimator accepts):
    weight >= 0; m2 >= 0; |mean| <= 1e100; m2 <= weight * 1e200 (the variance of values in [-1e100, 1e100] is at
    most 1e200, also after decay); an empty accumulator (weight 0) has mean = m2 = 0. ValueError naming the field."""
    if m.weight < 0:
        raise ValueError(f"{name}.weight is {m.weight!r}: a weight is never negative")
    if m.m2 < 0:
        raise ValueError(f"{name}.m2 is {m.m2!r}: a sum of squared deviations is never negative")
    if m.weight == 0 and (m.mean != 0 or m.m2 != 0):
        raise ValueError(f"{name}.weight is 0 but {name}.mean is {m.mean!r} and {name}.m2 is {m.m2!r}: an empty "
                         "accumulator has mean = m2 = 0")
    if abs(m.mean) > MAX_ABS_SCORE:
        raise ValueError(f"{name}.mean is {m.mean!r}: beyond the {MAX_ABS_SCORE:g} bound on scores")
    if m.m2 > m.weight * MAX_ABS_SCORE**2:
        raise ValueError(f"{name}.m2 is {m.m2!r}: more than {name}.weight * {MAX_ABS_SCORE:g}^2 "
                         f"({m.weight * MAX_ABS_SCORE**2!r}), the most scores within the bound can give")


def _check_counts(reward: Moments, group_mean: Moments) -> None:
    """Every group mean comes from at least one score, both decayed alike: group_mean.weight <= reward.weight,
    and both are 0 or both are > 0."""
    if group_mean.weight > reward.weight:
        raise ValueError(f"group_mean.weight ({group_mean.weight!r}) is larger than reward.weight "
                         f"({reward.weight!r}): every group holds at least one score")
    if (group_mean.weight == 0) != (reward.weight == 0):
        raise ValueError(f"group_mean.weight is {group_mean.weight!r} but reward.weight is {reward.weight!r}: "
                         "both are 0 (nothing merged) or both > 0")


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

    def is_finite(self) -> bool:
        """Every accumulated moment is a finite float (always true of a prior built by merges of valid batches)."""
        return all(math.isfinite(x) for m in (self.reward, self.group_mean) for x in (m.weight, m.mean, m.m2))

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
        """Load a dict made by `state_dict()`. Raises ValueError on a wrong schema/version or bad values
        (missing or non-numeric fields, non-finite or negative moments, a malformed `shaping`); self is then
        unchanged."""
        if not isinstance(state, dict) or state.get("schema") != SCHEMA:
            raise ValueError(f"not an EBPO prior state (schema {SCHEMA!r} expected)")
        version = state.get("version")
        if isinstance(version, bool) or not isinstance(version, int) or version != SCHEMA_VERSION:
            raise ValueError(
                f"EBPO prior state version {state.get('version')!r:.40} is not supported (expected {SCHEMA_VERSION})"
            )
        acc = {}
        for name in ("reward", "group_mean"):
            d = state.get(name)
            if not isinstance(d, dict) or not {"weight", "mean", "m2"} <= set(d):
                raise ValueError(
                    f"EBPO prior state is missing or has a malformed field: {name} must be an object with "
                    f"weight, mean and m2, got {d!r:.80}"
                )
            m = Moments(*(_number(f"{name}.{key}", d[key]) for key in ("weight", "mean", "m2")))
            if not all(math.isfinite(x) for x in (m.weight, m.mean, m.m2)):
                raise ValueError(f"{name} has invalid moments {d}")
            _check_moments(name, m)
            acc[name] = m
        _check_counts(acc["reward"], acc["group_mean"])
        updates = state.get("updates")
        if isinstance(updates, bool) or not isinstance(updates, int) or updates < 0:
            raise ValueError(
                f"EBPO prior state is missing or has a malformed field: updates must be a non-negative integer, "
                f"got {updates!r:.40}"
            )
        if (updates == 0) != (acc["reward"].weight == 0):
            raise ValueError(f"updates is {updates} but reward.weight is {acc['reward'].weight!r}: a prior that "
                             "merged no batch has weight 0, and one that merged a batch has weight > 0")
        shaping = _check_shaping(state.get("shaping"))
        self.assign(EBPOPrior(acc["reward"], acc["group_mean"], updates, shaping))

    def save(self, path: str | os.PathLike, inputs=(), **extra) -> None:
        """Write state_dict() (plus `extra` top-level keys, e.g. global_step) as JSON, atomically.

        Refuses (ValueError naming the file) a non-finite prior, a target that is not a regular file, or one of
        `inputs`; a temporary file left by a killed earlier save of the same target is removed.
        """
        try:
            text = json.dumps({**self.state_dict(), **extra}, indent=2, sort_keys=True, allow_nan=False) + "\n"
        except ValueError:
            raise ValueError(
                f"refusing to save EBPO prior to {os.fspath(path)}: it holds a non-finite value ({self.state_dict()})"
            ) from None
        atomic_write_text(path, text, inputs=inputs)


_PRIOR = EBPOPrior()


def get_prior() -> EBPOPrior:
    """The process-wide prior used by `adv_estimator=ebpo` (same object for the life of the process)."""
    return _PRIOR


def reset_prior() -> None:
    """Empty the process-wide prior (e.g. between independent runs in one process)."""
    _PRIOR.reset()
