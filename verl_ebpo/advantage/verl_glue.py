"""verl glue: `adv_estimator=ebpo` in verl's registry, and EBPO's diagnostics in the run's logged metrics.

verl calls a registered estimator as fn(token_level_rewards=, response_mask=, config=algorithm_config,
index=uid, [reward_baselines=]) and takes back (advantages, returns). An estimator cannot return metrics,
so each call's diagnostics are queued here and merged into the next `Tracking.log` of the same process
(the TaskRunner/driver, where both the advantage and the step's logging run). See `install_metrics_hook`.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import threading

import torch

from verl_ebpo.advantage.estimator import ebpo_advantage
from verl_ebpo.advantage.options import ESTIMATOR_NAME, EBPOOptions
from verl_ebpo.advantage.prior import get_prior

logger = logging.getLogger(__name__)

_COUNT_KEYS = ("ebpo/padding_rows", "ebpo/skipped_rows", "ebpo/saturated_rows")
_LATEST_KEYS = ("ebpo/prior_mean", "ebpo/sigma2", "ebpo/tau2", "ebpo/prior_weight")
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
    _warn_if_resume_resets_prior(options)
    with torch.no_grad():
        advantages, diagnostics = ebpo_advantage(token_level_rewards, response_mask, index, get_prior(), options)
    record_metrics(diagnostics)
    return advantages, advantages


def record_metrics(diagnostics: dict) -> None:
    install_metrics_hook()
    with _lock:
        _pending.append(diagnostics)


def drain_metrics() -> dict:
    """Merge and clear the diagnostics of the calls since the last drain: counts (padding/skipped/saturated rows)
    summed, the prior's statistics the latest call's (what the next step starts from), the rest averaged."""
    with _lock:
        calls, _pending[:] = list(_pending), []
    merged = {}
    for key in sorted({k for d in calls for k in d}):
        v = [d[key] for d in calls if key in d]
        merged[key] = float(sum(v) if key in _COUNT_KEYS else v[-1] if key in _LATEST_KEYS else sum(v) / len(v))
    return merged


def install_metrics_hook() -> bool:
    """Make verl's `Tracking.log` include the pending EBPO diagnostics (idempotent).

    verl 0.9.1 offers no way for an estimator to add metrics: its trainers log one `metrics` dict per step
    through `verl.utils.tracking.Tracking.log` in the process that also computes the advantage. We wrap
    that public method once, in that process only, the first time `ebpo` runs (so non-EBPO runs are
    untouched). Limits: metrics of a call appear in the next log of the same process; a custom trainer
    that logs elsewhere will not see them (call `drain_metrics()` yourself).
    """
    from verl.utils.tracking import Tracking

    if getattr(Tracking.log, "_ebpo_wrapped", False):
        return True
    original = Tracking.log

    @functools.wraps(original)
    def log(self, data, step, *args, **kwargs):
        extra = drain_metrics()
        if extra and isinstance(data, dict):
            data = {**extra, **data}
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


# -- start-up checks (run in the TaskRunner, the process that computes every advantage) -----------------

ENTRY_POINT = "ebpo"  # pyproject.toml: [project.entry-points."verl.plugins"] ebpo = "verl_ebpo.plugin"
CALLBACK_CLASS = "verl_ebpo.EBPOCheckpointCallback"
PLUGIN_FIX = (
    "fix: `pip install verl-ebpo` (or `pip install -e <checkout>`) on every node, not only in the Ray working dir "
    "(recipes/runtime_env.yaml), and leave VERL_USE_EXTERNAL_PLUGINS unset or include ebpo in it"
)
_startup = {"callback": False, "warned": False}
_TRAINER_MODULES = ("verl.trainer.ppo.v1.trainer_base", "verl.trainer.ppo.ray_trainer")


def why_not_registered() -> str:
    """Why verl's own plugin loading (`import verl`, group `verl.plugins`) did not register `ebpo` here."""
    policy = os.getenv("VERL_USE_EXTERNAL_PLUGINS", "auto").strip().lower()
    if policy == "none":
        return "VERL_USE_EXTERNAL_PLUGINS=none turns verl's plugin loading off in this process"
    if policy != "auto" and ENTRY_POINT not in {p.strip() for p in policy.split(",")}:
        return f"VERL_USE_EXTERNAL_PLUGINS={policy} does not name the {ENTRY_POINT!r} plugin"
    from importlib.metadata import entry_points

    eps = [ep for ep in entry_points(group="verl.plugins") if ep.name == ENTRY_POINT]
    if not eps:
        return (
            "the verl-ebpo package is not installed on this node (no 'ebpo' entry point in group verl.plugins; "
            "importable only from the working dir or PYTHONPATH)"
        )
    try:
        eps[0].load()
    except Exception as e:  # verl logs this only at DEBUG level
        return f"loading the plugin {eps[0].value} failed: {type(e).__name__}: {e}"
    return "verl was imported before the plugin was installed, or the registry was changed after import"


def ensure_registered() -> bool:
    """Make sure `ebpo` is this process's verl estimator, before any model loads. Returns True if it had to
    register it (then one warning names why verl's plugin loading did not). Raises RuntimeError (one line)
    when the name is taken by another function."""
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY

    current = ADV_ESTIMATOR_REGISTRY.get(ESTIMATOR_NAME)
    if current is compute_ebpo_outcome_advantage:
        return False
    if current is not None:
        where = f"{getattr(current, '__module__', '?')}.{getattr(current, '__qualname__', current)!s}"
        raise RuntimeError(
            f"algorithm.adv_estimator=ebpo: verl's registry maps 'ebpo' to {where}, not verl_ebpo's estimator "
            "(another package registers that name, or a second copy of verl_ebpo is imported); remove it or "
            "install one verl-ebpo"
        )
    cause = why_not_registered()
    register()
    logger.warning(
        "EBPO: 'ebpo' was not registered in this process (%s); %s registered it before any model loads. %s",
        cause, CALLBACK_CLASS, PLUGIN_FIX,
    )
    return True


def note_checkpoint_callback() -> None:
    """Called by EBPOCheckpointCallback's constructor: this process saves and restores the prior."""
    _startup["callback"] = True


def _warn_if_resume_resets_prior(options: EBPOOptions) -> None:
    """Once per process, inside verl's trainer: a running prior without the checkpoint callback is lost on resume."""
    if _startup["warned"] or _startup["callback"] or options.prior_scope != "running":
        return
    if not any(m in sys.modules for m in _TRAINER_MODULES):  # not a trainer (the simulator, a test)
        return
    _startup["warned"] = True
    logger.warning(
        "EBPO: algorithm.ebpo.prior_scope=running without trainer.checkpoint_callback_class=%s: the prior is not "
        "saved in checkpoints, so a resume restarts it empty; add that override (docs/checkpoint.md)",
        CALLBACK_CLASS,
    )
