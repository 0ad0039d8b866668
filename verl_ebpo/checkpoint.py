"""Save the EBPO prior beside verl's checkpoint and restore it on resume.

Use: `trainer.checkpoint_callback_class=verl_ebpo.EBPOCheckpointCallback` (verl's V1 trainer).

Save: verl calls `on_save(trainer, global_step, checkpoint_dir, async_save)` after every checkpoint; the callback
writes the process-wide prior to `<checkpoint_dir>/ebpo_prior.json`, atomically.

Restore: verl has no load hook. It builds the callback in `PPOTrainer.__init__` (in the TaskRunner, the process that
later computes every advantage) before `_load_checkpoint` runs, so the constructor finds the folder verl will
resume from with the rules of `PPOTrainer._load_checkpoint` (`find_resume_checkpoint`, tested equal)
and loads the prior from it. Only `algorithm.adv_estimator == "ebpo"` activates the callback.
"""

from __future__ import annotations

import logging
import os
from typing import NamedTuple

from verl.trainer.ppo.checkpoint_callback import CheckpointCallback
from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

from verl_ebpo import __version__
from verl_ebpo.advantage.options import ESTIMATOR_NAME, EBPOOptions, config_get
from verl_ebpo.advantage.prior import PRIOR_FILENAME, EBPOCheckpointError, EBPOPrior, get_prior, read_prior_file

logger = logging.getLogger(__name__)


class ResumePoint(NamedTuple):
    """The checkpoint verl will resume from: its global_step_N folder (absolute when verl makes it so) and N."""

    folder: str
    step: int


def find_resume_checkpoint(trainer_config) -> ResumePoint | None:
    """The global_step_N folder verl's V1 trainer will resume from, or None for a fresh start: step 1 of verl 0.9.1's
    `PPOTrainer._load_checkpoint`, with verl's own `find_latest_ckpt_path` (tested equal). A setting verl would refuse
    once the models are loaded, minutes later, is an EBPOCheckpointError here, at the trainer's construction."""
    mode, path = config_get(trainer_config, "resume_mode", "auto"), config_get(trainer_config, "resume_from_path")
    if mode == "disable":
        return None
    if mode == "auto":
        folder = find_latest_ckpt_path(os.path.join(os.getcwd(), config_get(trainer_config, "default_local_dir")))
    elif mode != "resume_path":
        raise EBPOCheckpointError(f"unknown trainer.resume_mode {mode!r}; verl accepts disable, auto or resume_path")
    elif isinstance(path, str) and "global_step_" in path:
        folder = os.path.join(os.getcwd(), path)
    else:
        raise EBPOCheckpointError(f"trainer.resume_mode=resume_path needs trainer.resume_from_path naming a "
                                  f"global_step_N folder, got {path!r} (verl asserts the same)")
    try:
        return None if folder is None else ResumePoint(folder, int(folder.split("global_step_")[-1]))
    except ValueError:
        raise EBPOCheckpointError(f"cannot read the global step from checkpoint folder {folder!r}: it must end in "
                                  "global_step_N (verl would fail too; note: no trailing slash)") from None


def save_prior(checkpoint_dir: str | os.PathLike, global_step: int, prior: EBPOPrior | None = None) -> str:
    """Write `prior` (default: the process-wide one) to `<checkpoint_dir>/ebpo_prior.json` atomically; its path."""
    path = os.path.join(os.fspath(checkpoint_dir), PRIOR_FILENAME)
    (prior or get_prior()).save(path, global_step=int(global_step), verl_ebpo_version=__version__)
    return path


def restore_prior(config, prior: EBPOPrior | None = None) -> ResumePoint | None:
    """Load into `prior` (default: the process-wide one) the prior of the checkpoint verl will resume from; a fresh
    start empties it (returns None). EBPOCheckpointError when the checkpoint holds no prior (unless
    algorithm.ebpo.allow_missing_state: a warning, an empty prior), a corrupt one, or one of another global step."""
    prior = prior or get_prior()
    options = EBPOOptions.from_algorithm_config(config_get(config, "algorithm"))
    point = find_resume_checkpoint(config_get(config, "trainer"))
    path = point and os.path.join(point.folder, PRIOR_FILENAME)
    if point is None or not os.path.exists(path):
        if point is None:
            return prior.reset()
        reason = (f"verl will resume from checkpoint {point.folder}, but it holds no EBPO prior "
                  f"({PRIOR_FILENAME}); it was saved without trainer.checkpoint_callback_class="
                  "verl_ebpo.EBPOCheckpointCallback, or with another adv_estimator")
        if not options.allow_missing_state:
            raise EBPOCheckpointError(f"{reason}. Set +algorithm.ebpo.allow_missing_state=true to resume with a "
                                      "fresh, empty prior.")
        logger.warning("%s. allow_missing_state=true: starting a fresh, empty EBPO prior at step %d.", reason, point.step)
        prior.reset()
        return point
    loaded, step = read_prior_file(path)
    if step != point.step:
        raise EBPOCheckpointError(f"EBPO prior file {path} was saved at global step {step}, but verl resumes at step "
                                  f"{point.step} from that folder; the file does not belong to this checkpoint")
    prior.assign(loaded)
    logger.info("EBPO: restored the prior from %s (step %d: %s)", path, step, loaded.state_dict())
    return point


class EBPOCheckpointCallback(CheckpointCallback):
    """verl checkpoint callback: with `algorithm.adv_estimator=ebpo` its construction restores the prior of the
    checkpoint verl will resume from and `on_save` writes `<checkpoint_dir>/ebpo_prior.json`; otherwise both do
    nothing. Attributes: `active` (bool), `resumed_from` (ResumePoint or None)."""

    def __init__(self, config=None):
        super().__init__(config=config)
        estimator = config_get(config_get(config, "algorithm"), "adv_estimator")
        self.active, self.resumed_from = str(getattr(estimator, "value", estimator)) == ESTIMATOR_NAME, None
        if self.active:  # in the TaskRunner, before any model loads: the process that computes every advantage
            from verl_ebpo.advantage.verl_glue import ensure_registered

            ensure_registered()
            self.resumed_from = restore_prior(config)

    def on_save(self, trainer, global_step: int, checkpoint_dir: str, async_save: bool = False, **kwargs):
        if self.active:  # with async_save the shards may still be in flight; this file is complete when we return
            save_prior(checkpoint_dir, global_step)
