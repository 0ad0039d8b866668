"""Save the EBPO prior beside verl's checkpoint and restore it on resume (`verl-ebpo inspect`: `verl_ebpo.tools.inspect_prior`).

Use: `trainer.checkpoint_callback_class=verl_ebpo.EBPOCheckpointCallback` (verl's V1 trainer).

Save: verl calls `on_save(trainer, global_step, checkpoint_dir, async_save)` after every checkpoint (after
`latest_checkpointed_iteration.txt` is written; with `async_save` that file is not written by the trainer).
The callback writes the process-wide prior (`verl_ebpo.advantage.get_prior()`) as JSON to
`<checkpoint_dir>/ebpo_prior.json`, atomically (temp file in the same folder, fsync, rename).

Restore: verl has no load hook. It builds the callback in `PPOTrainer.__init__` (in the TaskRunner Ray actor,
the process that later computes every advantage) before `_load_checkpoint` runs. So the constructor finds the
folder verl will resume from with the rules of `PPOTrainer._load_checkpoint` (verl/trainer/ppo/v1/trainer_base.py),
mirrored in `find_resume_checkpoint`, and loads the prior from it.

Only `algorithm.adv_estimator == "ebpo"` activates the callback; with any other estimator it does nothing
(no file written, nothing read, the prior untouched), so a later EBPO resume from such a checkpoint gets the
"no prior" error instead of silently loading an empty prior.

This module imports verl only when `EBPOCheckpointCallback` is first looked up or a resume folder is searched
(importing verl takes seconds; `verl-ebpo inspect` never needs it: it mirrors verl's tracker rule, tested equal).

Files are read defensively: a FIFO, a symlink loop or a dangling link in place of the prior file or of verl's
tracker is refused for what it is before anything is opened (no hang), deeply nested or oversized JSON and
malformed fields are "corrupt" errors naming the file, never a traceback.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from verl_ebpo import __version__
from verl_ebpo.advantage.options import ESTIMATOR_NAME, EBPOOptions
from verl_ebpo.advantage.prior import EBPOPrior, UnreadableStateFile, get_prior, read_state_file
from verl_ebpo.files import unreadable_reason
from verl_ebpo.spec import config_get as _get

logger = logging.getLogger(__name__)

PRIOR_FILENAME = "ebpo_prior.json"
TRACKER_FILENAME = "latest_checkpointed_iteration.txt"  # verl's get_checkpoint_tracker_filename
MISSING_STATE_OVERRIDE = "+algorithm.ebpo.allow_missing_state=true"


class EBPOCheckpointError(ValueError):
    """A checkpoint's EBPO prior is missing, unreadable, or does not match the checkpoint."""


@dataclass(frozen=True)
class ResumePoint:
    """The checkpoint verl will resume from: its global_step_N folder (absolute when verl makes it so) and N."""

    folder: str
    step: int

    @property
    def prior_path(self) -> str:
        return os.path.join(self.folder, PRIOR_FILENAME)


def _estimator_name(config: Any) -> str:
    value = _get(_get(config, "algorithm"), "adv_estimator")
    return str(getattr(value, "value", value))


# -- where verl resumes from -------------------------------------------------------------------------


def find_resume_checkpoint(trainer_config: Any) -> ResumePoint | None:
    """The global_step_N folder verl's V1 trainer will resume from, or None for a fresh start.

    Mirrors step 1 of `PPOTrainer._load_checkpoint` (verl 0.9.1, v1/trainer_base.py):
      - resume_mode "disable" -> None.
      - "auto": `default_local_dir` (joined to the current working directory when relative) is searched with verl's
        own `find_latest_ckpt_path`, which reads `latest_checkpointed_iteration.txt` and returns None when that
        file or the folder it names is missing.
      - "resume_path": `resume_from_path` must be a str containing "global_step_"; relative -> joined to cwd.
        (verl does not check that it exists.)
      - N = int(folder.split("global_step_")[-1]), exactly as verl computes its global step.
    Where verl would fail (an assert, an unknown mode, an unparsable step) this raises EBPOCheckpointError with
    the reason, at construction time instead of minutes later.
    """
    mode = _get(trainer_config, "resume_mode", "auto")
    if mode == "disable":
        return None
    if mode == "auto":
        root = _get(trainer_config, "default_local_dir")
        if not isinstance(root, (str, os.PathLike)):
            raise EBPOCheckpointError(f"trainer.resume_mode=auto needs trainer.default_local_dir, got {root!r}")
        root = os.fspath(root)
        if not os.path.isabs(root):
            root = os.path.join(os.getcwd(), root)
        from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

        check_tracker(root)
        folder = find_latest_ckpt_path(root)
        if folder is None:
            return None
    elif mode == "resume_path":
        folder = _get(trainer_config, "resume_from_path")
        if not isinstance(folder, str):
            raise EBPOCheckpointError(
                f"trainer.resume_mode=resume_path needs trainer.resume_from_path to be a path (str), got {folder!r} "
                "(verl asserts the same: 'resume ckpt must be str type')"
            )
        if "global_step_" not in folder:
            raise EBPOCheckpointError(
                f"trainer.resume_from_path={folder!r} must name a global_step_N folder "
                "(verl asserts the same: 'resume ckpt must specify the global_steps')"
            )
        if not os.path.isabs(folder):
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


def check_tracker(root: str) -> int | None:
    """The step in `root`'s `latest_checkpointed_iteration.txt` (None when there is none), parsed as verl's
    `find_latest_ckpt_path` parses it; refuses a tracker that verl would hang or fail on.

    verl opens and reads it blindly: a FIFO there blocks forever, text that is not a step number raises a bare
    ValueError. An absent tracker is fine (verl then starts fresh). Raises EBPOCheckpointError naming the file.
    """
    tracker = os.path.join(root, TRACKER_FILENAME)
    if not os.path.lexists(tracker):
        return None
    why = unreadable_reason(tracker)
    if why:
        raise EBPOCheckpointError(f"checkpoint tracker {tracker}: {why}; verl reads the latest step from it")
    fd = os.open(tracker, os.O_RDONLY | os.O_NONBLOCK)  # never waits, even if a FIFO was swapped in meanwhile
    with os.fdopen(fd, "rb") as f:
        raw = f.read(4097)
    try:
        return int(raw.decode())  # exactly verl's parse
    except (UnicodeDecodeError, ValueError):
        raise EBPOCheckpointError(
            f"checkpoint tracker {tracker} holds {raw[:40]!r}, not a step number (verl would fail on it too); "
            "write the step to resume from into it, or use trainer.resume_mode=resume_path"
        ) from None


# -- the prior file ----------------------------------------------------------------------------------


def save_prior(checkpoint_dir: str | os.PathLike, global_step: int, prior: EBPOPrior | None = None) -> str:
    """Write `prior` (default: the process-wide one) to `<checkpoint_dir>/ebpo_prior.json` atomically.

    Returns the file's path. The JSON holds the prior's state_dict (schema, version, both accumulators, updates,
    shaping) plus `global_step` and `verl_ebpo_version`. Refuses (ValueError naming the file) a non-finite prior or
    a target that is not a regular file; a failed write (disk full) is an OSError naming it, the old file intact.
    """
    prior = get_prior() if prior is None else prior
    path = os.path.join(os.fspath(checkpoint_dir), PRIOR_FILENAME)
    prior.save(path, global_step=int(global_step), verl_ebpo_version=__version__)
    return path


def read_prior_file(path: str | os.PathLike) -> tuple[EBPOPrior, int]:
    """Load a file written by `save_prior`: (prior, global_step). Any defect -> EBPOCheckpointError naming the file.

    Never blocks (a FIFO is refused by a stat before it is opened).
    """
    path = os.fspath(path)
    try:
        state = read_state_file(path)
    except UnreadableStateFile as e:
        raise EBPOCheckpointError(f"cannot read EBPO prior file {path}: {e}") from None
    except ValueError as e:
        raise EBPOCheckpointError(f"EBPO prior file {path} is corrupt or unreadable: {e}") from None
    try:
        prior = EBPOPrior()
        prior.load_state_dict(state)
    except ValueError as e:
        raise EBPOCheckpointError(f"EBPO prior file {path} is corrupt or unreadable: {e}") from None
    step = state.get("global_step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise EBPOCheckpointError(f"EBPO prior file {path} has no valid global_step (got {step!r:.40})")
    return prior, step


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
    if not os.path.lexists(path):  # something there (a FIFO, a link loop, a dangling link): read_prior_file says what
        where = "" if os.path.isdir(point.folder) else " (that folder does not exist)"
        reason = (
            f"verl will resume from checkpoint {point.folder}{where}, but it holds no EBPO prior ({PRIOR_FILENAME}); "
            "it was saved without trainer.checkpoint_callback_class=verl_ebpo.EBPOCheckpointCallback, or with "
            "another adv_estimator"
        )
        if options.allow_missing_state:
            logger.warning(
                "%s. allow_missing_state=true: starting a fresh, empty EBPO prior at step %d.", reason, point.step
            )
            prior.reset()
            return point
        raise EBPOCheckpointError(f"{reason}. Set {MISSING_STATE_OVERRIDE} to resume with a fresh, empty prior.")
    loaded, step = read_prior_file(path)
    if step != point.step:
        raise EBPOCheckpointError(
            f"EBPO prior file {path} was saved at global step {step}, but verl resumes at step {point.step} "
            "from that folder; the file does not belong to this checkpoint"
        )
    current = options.prior_shaping()
    if loaded.shaping is not None and dict(loaded.shaping) != current:
        logger.warning(
            "EBPO prior in %s was accumulated with %s, but this run uses %s; continuing from the saved statistics "
            "under the new options",
            path,
            dict(loaded.shaping),
            current,
        )
    prior.assign(loaded)
    logger.info(
        "EBPO: restored the prior from %s (step %d: mu_glob=%r sigma2=%r tau2=%r weight=%r)",
        path, step, prior.mu_glob, prior.sigma2, prior.tau2, prior.reward.weight,
    )
    return point


# -- the verl callback (built lazily: it subclasses verl's CheckpointCallback) -----------------------


def _make_callback_class() -> type:
    from verl.trainer.ppo.checkpoint_callback import CheckpointCallback

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
            estimator = _estimator_name(config)
            self.active = estimator == ESTIMATOR_NAME
            self.resumed_from: ResumePoint | None = None
            if not self.active:
                logger.info(
                    "EBPOCheckpointCallback: algorithm.adv_estimator=%s is not ebpo; not saving or restoring a prior",
                    estimator,
                )
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

    EBPOCheckpointCallback.__module__ = __name__
    EBPOCheckpointCallback.__qualname__ = "EBPOCheckpointCallback"
    return EBPOCheckpointCallback


def __getattr__(name: str):
    if name == "EBPOCheckpointCallback":
        cls = _make_callback_class()
        globals()[name] = cls  # later lookups (and pickling) find it directly
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
