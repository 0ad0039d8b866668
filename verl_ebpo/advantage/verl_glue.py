"""verl glue: `adv_estimator=ebpo` in verl's registry, and EBPO's diagnostics in the run's logged metrics.

verl calls a registered estimator as fn(token_level_rewards=, response_mask=, config=algorithm_config,
index=uid, [reward_baselines=]) and takes back (advantages, returns). An estimator cannot return metrics,
so each call's diagnostics are queued here and merged into the next `Tracking.log` of the same process
(the TaskRunner/driver, where both the advantage and the step's logging run). See `install_metrics_hook`.
"""

from __future__ import annotations

import functools
import logging
import threading

import torch

from verl_ebpo.advantage.estimator import ebpo_advantage
from verl_ebpo.advantage.options import ESTIMATOR_NAME, EBPOOptions
from verl_ebpo.advantage.prior import get_prior

logger = logging.getLogger(__name__)

_COUNT_KEYS = ("ebpo/padding_rows", "ebpo/skipped_rows", "ebpo/saturated_rows")
_pending: list[dict] = []
_lock = threading.Lock()


def compute_ebpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index=None,
    config=None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """EBPO advantage for verl (outcome rewards only), with the process-wide running prior.

    Args:
        token_level_rewards: (bs, response_length)
        response_mask: (bs, response_length)
        index: (bs,) np.ndarray of prompt uids (verl's non_tensor_batch["uid"]).
        config: verl's `algorithm` config; options are read from `config.ebpo` (see EBPOOptions).
        **kwargs: other verl kwargs (reward_baselines, ...) are accepted and ignored.
    Returns:
        advantages, returns: (bs, response_length), the same tensor (outcome reward, no discounting).
    """
    options = EBPOOptions.from_algorithm_config(config)
    with torch.no_grad():
        advantages, diagnostics = ebpo_advantage(token_level_rewards, response_mask, index, get_prior(), options)
    record_metrics(diagnostics)
    return advantages, advantages


def record_metrics(diagnostics: dict) -> None:
    install_metrics_hook()
    with _lock:
        _pending.append(diagnostics)


def drain_metrics() -> dict:
    """Merge and clear the diagnostics of the calls since the last drain.

    Counts (padding/skipped/saturated rows) are summed; everything else is the mean over calls (prior statistics:
    the latest call's, which is what the next step starts from).
    """
    with _lock:
        calls = list(_pending)
        _pending.clear()
    if not calls:
        return {}
    merged: dict = {}
    keys = {k for d in calls for k in d}
    for key in sorted(keys):
        values = [d[key] for d in calls if key in d]
        if key in _COUNT_KEYS:
            merged[key] = float(sum(values))
        elif key in ("ebpo/prior_mean", "ebpo/sigma2", "ebpo/tau2", "ebpo/prior_weight"):
            merged[key] = float(values[-1])
        else:
            merged[key] = float(sum(values) / len(values))
    return merged


def install_metrics_hook() -> bool:
    """Make verl's `Tracking.log` include the pending EBPO diagnostics (idempotent).

    verl 0.9.1 offers no way for an estimator to add metrics: its trainers log one `metrics` dict per step
    through `verl.utils.tracking.Tracking.log` in the process that also computes the advantage. We wrap
    that public method once, in that process only, the first time `ebpo` runs (so non-EBPO runs are
    untouched). Limits: metrics of a call appear in the next log of the same process; a custom trainer
    that logs elsewhere will not see them (call `drain_metrics()` yourself).
    """
    try:
        from verl.utils.tracking import Tracking
    except ImportError:  # pragma: no cover - verl absent
        return False
    if getattr(Tracking.log, "_ebpo_wrapped", False):
        return True
    original = Tracking.log

    @functools.wraps(original)
    def log(self, data, step, *args, **kwargs):
        extra = drain_metrics()
        if extra and isinstance(data, dict):
            data = {**data, **{k: v for k, v in extra.items() if k not in data}}
        return original(self, data, step, *args, **kwargs)

    log._ebpo_wrapped = True
    Tracking.log = log
    return True


def register() -> None:
    """Register `ebpo` in verl's advantage-estimator registry (idempotent)."""
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, register_adv_est

    if ADV_ESTIMATOR_REGISTRY.get(ESTIMATOR_NAME) is compute_ebpo_outcome_advantage:
        return
    register_adv_est(ESTIMATOR_NAME)(compute_ebpo_outcome_advantage)
