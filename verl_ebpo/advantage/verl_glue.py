"""verl glue: `adv_estimator=ebpo` in verl's registry, and EBPO's diagnostics in the run's logged metrics.

verl calls a registered estimator as fn(token_level_rewards=, response_mask=, config=algorithm_config, index=uid,
...) and takes back (advantages, returns). An estimator cannot return metrics, so each call's diagnostics are
queued here and merged into the next `Tracking.log` of the same process (the TaskRunner, where both the advantage
and the step's logging run).
"""

from __future__ import annotations

import functools
import logging
import threading

import torch

from verl_ebpo.advantage.core import ebpo_advantage
from verl_ebpo.advantage.options import ESTIMATOR_NAME, EBPOOptions
from verl_ebpo.advantage.prior import get_prior

logger = logging.getLogger(__name__)

_COUNT_KEYS = ("ebpo/padding_rows", "ebpo/skipped_rows")
_LATEST_KEYS = ("ebpo/prior_mean", "ebpo/sigma2", "ebpo/tau2", "ebpo/prior_weight")
_pending: list[dict] = []
_lock = threading.Lock()


def compute_ebpo_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index=None,
                                   config=None, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """EBPO advantage for verl (outcome rewards) with the process-wide prior: (bs, T) rewards and mask, `index` the
    (bs,) prompt uids, `config` verl's `algorithm` config (options in `config.ebpo`); other kwargs are ignored.
    Returns advantages, returns: the same (bs, T) tensor."""
    with torch.no_grad():
        advantages, diagnostics = ebpo_advantage(token_level_rewards, response_mask, index, get_prior(),
                                                 EBPOOptions.from_algorithm_config(config))
    record_metrics(diagnostics)
    return advantages, advantages


def record_metrics(diagnostics: dict) -> None:
    install_metrics_hook()
    with _lock:
        _pending.append(diagnostics)


def drain_metrics() -> dict:
    """Merge and clear the diagnostics of the calls since the last drain: row counts summed, the prior's statistics
    the latest call's (what the next step starts from), the rest averaged."""
    with _lock:
        calls, _pending[:] = list(_pending), []
    merged = {}
    for key in sorted({k for d in calls for k in d}):
        v = [d[key] for d in calls if key in d]
        merged[key] = float(sum(v) if key in _COUNT_KEYS else v[-1] if key in _LATEST_KEYS else sum(v) / len(v))
    return merged


def install_metrics_hook() -> None:
    """Wrap verl's `Tracking.log` once, in this process, to include the pending diagnostics (the first time `ebpo`
    runs, so non-EBPO runs are untouched). A trainer that logs elsewhere should call `drain_metrics()` itself."""
    from verl.utils.tracking import Tracking

    if getattr(Tracking.log, "_ebpo_wrapped", False):
        return
    original = Tracking.log

    @functools.wraps(original)
    def log(self, data, step, *args, **kwargs):
        extra = drain_metrics()
        return original(self, {**extra, **data} if extra and isinstance(data, dict) else data, step, *args, **kwargs)

    log._ebpo_wrapped = True
    Tracking.log = log


def register() -> None:
    """Register `ebpo` in verl's advantage-estimator registry (idempotent; verl's ValueError, naming both functions,
    when another function holds the name)."""
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, register_adv_est

    if ADV_ESTIMATOR_REGISTRY.get(ESTIMATOR_NAME) is not compute_ebpo_outcome_advantage:
        register_adv_est(ESTIMATOR_NAME)(compute_ebpo_outcome_advantage)


def ensure_registered() -> None:
    """Make `ebpo` this process's verl estimator before any model loads (the checkpoint callback calls it in the
    TaskRunner), with one warning when verl's plugin loading did not register it."""
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY

    if ESTIMATOR_NAME not in ADV_ESTIMATOR_REGISTRY:
        logger.warning("EBPO: 'ebpo' was not registered in this process by verl's plugin loading (entry point group "
                       "verl.plugins); the checkpoint callback registered it. Fix: `pip install verl-ebpo` on every node "
                       "and leave VERL_USE_EXTERNAL_PLUGINS unset or include ebpo in it")
    register()
