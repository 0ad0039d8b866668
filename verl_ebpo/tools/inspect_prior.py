"""`verl-ebpo inspect PATH [--json] [--epsilon E]`: print the EBPO prior saved in a verl checkpoint.

PATH is an `ebpo_prior.json`, a `global_step_N` folder, or the checkpoint root (`trainer.default_local_dir`: the
latest checkpoint, found by verl's tracker rule, mirrored so that inspect never imports verl). Prints mu_glob,
sigma2, tau2, the weights and the shrinkage S for G = 1, 4, 8, 16, 32. Exit 0 done; a refusal is one line on
stderr, exit 2 (argparse's code for a bad argument).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from verl_ebpo.advantage.options import EBPOOptions
from verl_ebpo.advantage.prior import PRIOR_FILENAME, EBPOCheckpointError, EBPOPrior, read_prior_file
from verl_ebpo.tools.cli import one_line
from verl_ebpo.tools.files import unreadable_reason

INSPECT_GROUP_SIZES = (1, 4, 8, 16, 32)
# The largest prior file inspect reads: a saved prior is under 1 KiB; anything this large is not one, and is refused
# from its size alone, before it is opened (a 512 MiB file was read whole, 1.2 GB resident, to say "not valid JSON").
MAX_PRIOR_BYTES = 16 << 20  # 16 MiB
TRACKER_FILENAME = "latest_checkpointed_iteration.txt"  # verl's get_checkpoint_tracker_filename


def resolve_prior_path(target: str | os.PathLike) -> str:
    """A prior file, a global_step_N folder, or a checkpoint root (-> its latest checkpoint, as verl's auto resume).

    Nothing is opened here; a FIFO, a link loop or a dangling link is reported for what it is.
    """
    target = os.fspath(target)
    why = unreadable_reason(target)
    if why is None:
        return target
    if not os.path.isdir(target):
        raise EBPOCheckpointError(f"{target}: {why}; give a prior file, a global_step_N folder or a checkpoint root")
    if os.path.lexists(os.path.join(target, PRIOR_FILENAME)):
        return os.path.join(target, PRIOR_FILENAME)  # whatever it is, read_prior_file says what is wrong with it
    if os.path.lexists(os.path.join(target, TRACKER_FILENAME)):
        tracker = os.path.join(target, TRACKER_FILENAME)
        if unreadable_reason(tracker):  # a user-named path: a FIFO is refused, never opened
            raise EBPOCheckpointError(f"checkpoint tracker {tracker}: {unreadable_reason(tracker)}")
        # verl's find_latest_ckpt_path, mirrored (tested equal) so that inspect never imports verl: tracker -> N
        # -> <root>/global_step_N, which must exist
        with open(tracker, "rb") as f:
            raw = f.read(4097)
        try:
            latest = os.path.join(target, f"global_step_{int(raw.decode())}")
        except (UnicodeDecodeError, ValueError):
            raise EBPOCheckpointError(f"checkpoint tracker {tracker} holds {raw[:40]!r}, not a step number") from None
        why = unreadable_reason(latest, allow_dir=True, expected="a folder")
        if why is None and not os.path.isdir(latest):
            why = "it is a regular file, not a folder"
        if why is not None:  # a link loop is named as one, not as "does not exist"
            why = "which does not exist" if why == "it does not exist" else why.replace("it is", "which is", 1)
            raise EBPOCheckpointError(f"{target}: {TRACKER_FILENAME} names checkpoint folder {latest}, {why}")
        path = os.path.join(latest, PRIOR_FILENAME)
        if not os.path.lexists(path):
            raise EBPOCheckpointError(f"the latest checkpoint {latest} holds no EBPO prior ({PRIOR_FILENAME})")
        return path
    below = sorted(os.path.dirname(os.path.join(d, TRACKER_FILENAME)) for d, _, files in _walk(target, 2)
                   if TRACKER_FILENAME in files)
    hint = f" (the checkpoint root below it: {below[0]})" if below else ""
    raise EBPOCheckpointError(
        f"{target} holds neither {PRIOR_FILENAME} nor {TRACKER_FILENAME}{hint}; give a global_step_N folder, "
        "the prior file, or the checkpoint root (trainer.default_local_dir)"
    )


def _walk(top: str, depth: int):
    """os.walk down to `depth` levels below `top` (a run folder's checkpoints/, not a whole disk)."""
    base = top.rstrip(os.sep).count(os.sep)
    for d, dirs, files in os.walk(top):
        if d.count(os.sep) - base >= depth:
            dirs[:] = []
        yield d, dirs, files


def check_prior_file(path: str) -> None:
    """What inspect checks before the shared loader (`read_prior_file`) reads the file: its size, from a stat
    (larger than MAX_PRIOR_BYTES: refused unread), then the schema version's type (`"version": true` equals 1 in
    Python and was accepted)."""
    if unreadable_reason(path) is not None:
        return  # read_prior_file names what it is
    size = os.stat(path).st_size
    if size > MAX_PRIOR_BYTES:
        raise EBPOCheckpointError(
            f"EBPO prior file {path} is {size:,} bytes, larger than the {MAX_PRIOR_BYTES:,} bytes a prior file can be "
            "(a saved prior is under 1 KiB); not read"
        )
    try:
        with open(path, "rb") as f:
            state = json.loads(f.read(MAX_PRIOR_BYTES + 1).decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return  # read_prior_file says what is wrong, in its words
    version = state.get("version") if isinstance(state, dict) else None
    if isinstance(version, bool) or (version is not None and not isinstance(version, int)):
        raise EBPOCheckpointError(
            f"EBPO prior file {path}: version must be an integer, got {type(version).__name__} {json.dumps(version):.40}"
        )


WANTS = ("inspect reads an ebpo_prior.json, the global_step_N folder holding it, or the checkpoint root "
         "(trainer.default_local_dir)")


def not_a_prior(path: str) -> str | None:
    """What a file that is not named `ebpo_prior.json` is, when it is plainly not a prior file (a one-line
    message saying what it is and what inspect wants); None when it may be one (the loader then checks it).
    A metrics file is not "corrupt": it is another kind of file."""
    if os.path.basename(path) == PRIOR_FILENAME or unreadable_reason(path) is not None:
        return None
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 20)
    except OSError:
        return None
    try:
        whole = json.loads(head)
    except (ValueError, RecursionError):
        whole = None
    lines = [line for line in head.splitlines()[:2] if line.strip()]
    try:
        first = json.loads(lines[0]) if lines else None
    except (ValueError, RecursionError):
        first = None
    record = whole if isinstance(whole, dict) else first
    if isinstance(record, dict) and {"step", "data"} <= set(record):
        what = "verl's metrics file (the file logger's JSON lines, one per step)"
    elif isinstance(record, dict) and {"input", "output"} <= set(record):
        what = "a verl rollout dump (trainer.rollout_data_dir)"
    elif whole is not None:
        if isinstance(whole, dict) and "schema" in whole:
            return None  # may be a prior: the loader says what is wrong with it, if anything
        what = "a JSON file without an EBPO prior's \"schema\" (e.g. a results summary)"
    elif first is not None:
        what = "a JSON-lines file"
    elif head.lstrip().startswith(b"{"):
        return None  # a cut JSON object, maybe a prior: the loader's "corrupt" is the right word
    else:
        what = "not JSON"
    return f"{path} is {what}, not an EBPO prior file; {WANTS}"


def describe_prior(prior: EBPOPrior, global_step: int, group_sizes=INSPECT_GROUP_SIZES,
                   epsilon: float | None = None) -> dict:
    """The prior's numbers and S for each G (epsilon: the run's `algorithm.ebpo.epsilon`, default EBPO's)."""
    epsilon = EBPOOptions().epsilon if epsilon is None else epsilon
    return {
        "global_step": global_step,
        "updates": prior.updates,
        "mu_glob": prior.mu_glob,
        "sigma2": prior.sigma2,
        "tau2": prior.tau2,
        "weight": prior.reward.weight,
        "group_mean_weight": prior.group_mean.weight,
        "shrinkage": {str(g): prior.shrinkage_for(g, epsilon) for g in group_sizes},
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "path",
        help=f"a global_step_N folder, its {PRIOR_FILENAME}, or the checkpoint root (trainer.default_local_dir: "
        "the latest checkpoint, as verl's resume_mode=auto finds it)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    default = EBPOOptions().epsilon
    parser.add_argument(
        "--epsilon", default=str(default), help=f"the run's algorithm.ebpo.epsilon, for S (default {default:g})"
    )


def _epsilon(text) -> float:
    """--epsilon, checked by the rule of the option it stands for (`EBPOOptions.epsilon`)."""
    key = "algorithm.ebpo.epsilon"
    try:
        return EBPOOptions(epsilon=text).epsilon
    except ValueError as e:
        raise EBPOCheckpointError(f"{str(e).replace(key, '--epsilon', 1)} (as {key})") from None


def run(args: argparse.Namespace) -> int:
    try:
        epsilon = _epsilon(args.epsilon)
        path = resolve_prior_path(args.path)
        if unreadable_reason(path):  # a FIFO, a link loop, a dangling link: named, never opened
            raise EBPOCheckpointError(f"cannot read EBPO prior file {path}: {unreadable_reason(path)}")
        other = not_a_prior(path)
        if other:
            raise EBPOCheckpointError(other)
        check_prior_file(path)
        prior, step = read_prior_file(path)
        d = describe_prior(prior, step, epsilon=epsilon)
    except (EBPOCheckpointError, OSError) as e:
        print(f"verl-ebpo inspect: error: {one_line(str(e))}", file=sys.stderr)
        return 2
    except (ValueError, TypeError, ArithmeticError, RecursionError) as e:  # any ill-typed content: one line
        print(f"verl-ebpo inspect: error: EBPO prior file {path} is not a valid prior: "
              f"{type(e).__name__}: {one_line(str(e))[:200]}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"path": os.path.abspath(path), **d}, sort_keys=True))
        return 0
    lines = [
        f"EBPO prior  {os.path.abspath(path)}",
        f"global_step {step}   updates {prior.updates}",
        f"mu_glob     {prior.mu_glob!r}",
        f"sigma2      {prior.sigma2!r}",
        f"tau2        {prior.tau2!r}",
        f"weight      {prior.reward.weight!r}   (group means: {prior.group_mean.weight!r})",
        f"S = (sigma2/G) / (sigma2/G + tau2), 1 when the denominator <= {epsilon:g}:",
    ]
    lines += [f"  G={g:<3d} S={d['shrinkage'][str(g)]:.6f}" for g in INSPECT_GROUP_SIZES]
    print("\n".join(lines))
    return 0
