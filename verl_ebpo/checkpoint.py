"""Save the EBPO prior beside verl's checkpoint and restore it on resume (`verl-ebpo inspect`: `verl_ebpo.tools.inspect_prior`).

Use: `trainer.checkpoint_callback_class=verl_ebpo.EBPOCheckpointCallback` (verl's V1 trainer).

Save: verl calls `on_save(trainer, global_step, checkpoint_dir, async_save)` after every checkpoint. The callback
writes the process-wide prior as JSON to `<checkpoint_dir>/ebpo_prior.json`, atomically (temp file, os.replace).

Restore: verl has no load hook. It builds the callback in `PPOTrainer.__init__` (in the TaskRunner Ray actor,
the process that later computes every advantage) before `_load_checkpoint` runs. So the constructor finds the
folder verl will resume from with the rules of `PPOTrainer._load_checkpoint` (verl/trainer/ppo/v1/trainer_base.py),
mirrored in `find_resume_checkpoint`, and loads the prior from it.

Only `algorithm.adv_estimator == "ebpo"` activates the callback; with any other estimator it does nothing, so a
later EBPO resume from such a checkpoint gets the "no prior" error instead of silently loading an empty prior.
The file readers live in `verl_ebpo.advantage.prior` (verl-free, shared with `verl-ebpo inspect`).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from verl.trainer.ppo.checkpoint_callback import CheckpointCallback

from verl_ebpo import __version__
from verl_ebpo.advantage.options import ESTIMATOR_NAME, EBPOOptions
from verl_ebpo.advantage.prior import (  # noqa: F401  (re-exported: the checkpoint's file API)
    PRIOR_FILENAME, TRACKER_FILENAME, EBPOCheckpointError, EBPOPrior, check_tracker, get_prior, read_prior_file,
)
from verl_ebpo.spec import config_get as _get

logger = logging.getLogger(__name__)

MISSING_STATE_OVERRIDE = "+algorithm.ebpo.allow_missing_state=true"


@dataclass(frozen=True)
class ResumePoint:
    """The checkpoint verl will resume from: its global_step_N folder (absolute when verl makes it so) and N."""

    folder: str
    step: int

    @property
    def prior_path(self) -> str:
        return os.path.join(self.folder, PRIOR_FILENAME)


def find_resume_checkpoint(trainer_config: Any) -> ResumePoint | None:
    """The global_step_N folder verl's V1 trainer will resume from, or None for a fresh start.

    Mirrors step 1 of `PPOTrainer._load_checkpoint` (verl 0.9.1, v1/trainer_base.py):
      - resume_mode "disable" -> None.
      - "auto": `default_local_dir` (joined to the current working directory when relative) is searched with verl's
        own `find_latest_ckpt_path` (None when the tracker or the folder it names is missing).
      - "resume_path": `resume_from_path` must be a str containing "global_step_"; relative -> joined to cwd.
      - N = int(folder.split("global_step_")[-1]), exactly as verl computes its global step.
    Where verl would fail (an assert, an unknown mode, an unparsable step) this raises EBPOCheckpointError with
    the reason, at construction time instead of minutes later.
    """
    mode = _get(trainer_config, "resume_mode", "auto")
    if mode == "disable":
        return None
    if mode == "auto":
        from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

        root = _get(trainer_config, "default_local_dir")
        if not isinstance(root, (str, os.PathLike)):
            raise EBPOCheckpointError(f"trainer.resume_mode=auto needs trainer.default_local_dir, got {root!r}")
        root = os.path.join(os.getcwd(), os.fspath(root))  # join keeps an absolute root as it is
        check_tracker(root)
        folder = find_latest_ckpt_path(root)
        if folder is None:
            return None
    elif mode == "resume_path":
        folder = _get(trainer_config, "resume_from_path")
        if not isinstance(folder, str) or "global_step_" not in folder:
            raise EBPOCheckpointError(
                f"trainer.resume_mode=resume_path needs trainer.resume_from_path to be a path (str) naming a "
                f"global_step_N folder, got {folder!r} (verl asserts the same)"
            )
        folder = os.path.join(os.getcwd(), folder)
    else:
        raise EBPOCheckpointError(
            f"unknown trainer.resume_mode {mode!r}; verl accepts disable, auto or resume_path "
            "(verl itself logs this and then fails in _load_checkpoint)"
        )
    try:
        step = int(folder.split("global_step_")[-1])
    except ValueError:
        raise EBPOCheckpointError(
            f"cannot read the global step from checkpoint folder {folder!r}: it must end in global_step_N "
            "(verl parses it the same way and would fail too; note: no trailing slash)"
        ) from None
    return ResumePoint(folder=folder, step=step)


def save_prior(checkpoint_dir: str | os.PathLike, global_step: int, prior: EBPOPrior | None = None) -> str:
    """Write `prior` (default: the process-wide one) to `<checkpoint_dir>/ebpo_prior.json` atomically, with
    `global_step` and `verl_ebpo_version`; returns the path. A non-finite prior is refused (ValueError)."""
    path = os.path.join(os.fspath(checkpoint_dir), PRIOR_FILENAME)
    (get_prior() if prior is None else prior).save(path, global_step=int(global_step), verl_ebpo_version=__version__)
    return path


def restore_prior(config: Any, prior: EBPOPrior | None = None) -> ResumePoint | None:
    """Load into `prior` (default: the process-wide one) the prior of the checkpoint verl will resume from.

    Fresh start (no checkpoint) -> the prior is emptied, returns None. Otherwise returns the ResumePoint.
    Raises EBPOCheckpointError when the checkpoint has no prior file (unless algorithm.ebpo.allow_missing_state,
    then: warning, empty prior), when the file is corrupt or of another schema version, or when it was saved at
    another global step than the folder's. Warns when it was shaped by other options than the current ones.
    """
    prior = get_prior() if prior is None else prior
    options = EBPOOptions.from_algorithm_config(_get(config, "algorithm"))
    point = find_resume_checkpoint(_get(config, "trainer"))
    if point is None:
        prior.reset()
        logger.info("EBPO: no checkpoint to resume from; the prior starts empty")
        return None
    path = point.prior_path
    if not os.path.exists(path):
        where = "" if os.path.isdir(point.folder) else " (that folder does not exist)"
        reason = (
            f"verl will resume from checkpoint {point.folder}{where}, but it holds no EBPO prior ({PRIOR_FILENAME}); "
            "it was saved without trainer.checkpoint_callback_class=verl_ebpo.EBPOCheckpointCallback, or with "
            "another adv_estimator"
        )
        if not options.allow_missing_state:
            raise EBPOCheckpointError(f"{reason}. Set {MISSING_STATE_OVERRIDE} to resume with a fresh, empty prior.")
        logger.warning("%s. allow_missing_state=true: starting a fresh, empty EBPO prior at step %d.", reason,
                       point.step)
        prior.reset()
        return point
    loaded, step = read_prior_file(path)
    if step != point.step:
        raise EBPOCheckpointError(
            f"EBPO prior file {path} was saved at global step {step}, but verl resumes at step {point.step} "
            "from that folder; the file does not belong to this checkpoint"
        )
    if loaded.shaping is not None and dict(loaded.shaping) != options.prior_shaping():
        logger.warning("EBPO prior in %s was accumulated with %s, but this run uses %s; continuing from the saved "
                       "statistics under the new options", path, dict(loaded.shaping), options.prior_shaping())
    prior.assign(loaded)
    logger.info("EBPO: restored the prior from %s (step %d: mu_glob=%r sigma2=%r tau2=%r weight=%r)",
                path, step, prior.mu_glob, prior.sigma2, prior.tau2, prior.reward.weight)
    return point


class EBPOCheckpointCallback(CheckpointCallback):
    """verl checkpoint callback that saves the EBPO prior beside each checkpoint and restores it on resume.

    `trainer.checkpoint_callback_class=verl_ebpo.EBPOCheckpointCallback`. Constructed by verl's
    `build_checkpoint_callback(config)` in the trainer's __init__: with `algorithm.adv_estimator=ebpo` the
    construction restores the prior of the checkpoint verl will resume from (see `restore_prior`);
    `on_save` writes `<checkpoint_dir>/ebpo_prior.json`. With another estimator both do nothing.

    Attributes: `active` (bool), `resumed_from` (ResumePoint or None).
    """

    def __init__(self, config=None):
        super().__init__(config=config)
        if config is None:
            raise ValueError("EBPOCheckpointCallback needs the full trainer config (verl passes config=...)")
        estimator = _get(_get(config, "algorithm"), "adv_estimator")
        estimator = str(getattr(estimator, "value", estimator))
        self.active = estimator == ESTIMATOR_NAME
        self.resumed_from: ResumePoint | None = None
        if not self.active:
            logger.info("EBPOCheckpointCallback: algorithm.adv_estimator=%s is not ebpo; not saving or restoring "
                        "a prior", estimator)
            return
        # verl builds this in the TaskRunner before any model loads, the process that computes every advantage
        from verl_ebpo.advantage.verl_glue import ensure_registered, note_checkpoint_callback

        ensure_registered()
        note_checkpoint_callback()
        self.resumed_from = restore_prior(config)

    def on_save(self, trainer, global_step: int, checkpoint_dir: str, async_save: bool = False, **kwargs):
        # With async_save the worker shards may still be in flight; this file is complete when we return.
        if self.active:
            save_prior(checkpoint_dir, global_step)
