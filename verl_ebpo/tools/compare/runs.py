"""Reading runs for `verl-ebpo compare`: `ALGO@SEED=PATH`, verl's file-logger or TensorBoard files, merged by step.

- `parse_spec("grpo@1=PATH")` -> ("grpo", "1", "PATH"); a bad form is a `CompareError` (one line).
- `verl_logs.read_metrics(path, warn)`: verl's file logger, `{"step": N, "data": {...}}` per line (lines of one step
  merged); a line that is not JSON is skipped with one warning naming file and line; a JSON line of another shape
  (a step that is not an integer in [0, 10^9], a float or a bool; no `data` object) is an error naming file and line.
- `clean(merged)`: the values that are finite numbers as floats; every other value (NaN, inf, null, anything not
  a number) is left out and returned per metric and step, for the counted warnings and the final-window notes.
- `read_tensorboard(path)`: verl's `tensorboard` logger (event files), through TensorBoard's own
  `EventAccumulator`; without `tensorboard` installed, one line saying to `pip install tensorboard`.
- `read_run(paths, warn)`: one run from files and folders (one file per attempt of a resumed run), merged by step;
  where two files hold one step, the file whose first step is larger (the resumed attempt) wins the whole step;
  two files that start at the same step are two runs given one label: an error.
- `run_series(...)`: a run's per-step arrays (training steps 1..N that verl logged), one per metric, plus
  the answers generated at each step (`answers_generated`, the demo's count: answers trained on plus DAPO's
  dropped and surplus groups times G), the share of answers without learning signal where the metrics tell it,
  and the reward of all answers generated (`reward_all_answers`, see `is_dapo`).
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from verl_ebpo.tools import verl_logs

ANSWERS = "answers_generated"  # derived: answers generated at a step (trained on + DAPO's dropped)
REWARD_ALL = "reward_all_answers"  # derived: mean reward of all answers generated at a step (DAPO's dropped included)
NO_SIGNAL = "no_signal_share"  # derived: share of the answers generated with advantage 0 or dropped
EBPO_ZERO = "ebpo/zero_adv_frac"
DAPO_FILTER_PREFIX = "training/filter_groups/"
# the metrics the derived ones are computed from (their left-out values are reported too)
DAPO_INPUTS = (verl_logs.SCORE, verl_logs.DISCARDED_ANSWERS, verl_logs.DISCARDED_REWARD_SUM,
               verl_logs.DAPO_EVICTED_GROUPS, verl_logs.DAPO_SURPLUS_GROUPS)
_SPEC = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.+-]*)@([A-Za-z0-9][A-Za-z0-9_.-]*)=(.+)$")
TB_PREFIX = "events.out.tfevents"


class CompareError(ValueError):
    """Bad input to `verl-ebpo compare`: the message is one line naming what is wrong."""


def parse_spec(text: str, flag: str = "--run") -> tuple[str, str, str]:
    """`ALGO@SEED=PATH` -> (algo, seed, path); ALGO and SEED: letters, digits, `_.-` (ALGO also `+`)."""
    m = _SPEC.match(text)
    if not m:
        raise CompareError(f"{flag} takes ALGO@SEED=PATH (e.g. ebpo@1=runs/ebpo_s1/metrics.jsonl), got {text!r}")
    return m.group(1), m.group(2), m.group(3)


def read_tensorboard(path: Path) -> dict[int, dict]:
    """step -> scalars of one TensorBoard event file (verl's `tensorboard` logger)."""
    try:
        from tensorboard.backend.event_processing import event_accumulator
    except ImportError:
        raise CompareError(f"{path}: a TensorBoard event file; reading it needs `pip install tensorboard`") from None
    acc = event_accumulator.EventAccumulator(str(path), size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    steps: dict[int, dict] = defaultdict(dict)
    for tag in acc.Tags().get("scalars", []):
        for event in acc.Scalars(tag):
            steps[int(event.step)][tag] = float(event.value)
    return dict(steps)


ROLLOUT_DIRS = ("rollouts",)  # verl's rollout dumps (`trainer.rollout_data_dir`) as the demo names them


def is_rollout_dump(path: Path) -> bool:
    """A JSONL file of verl's rollout dumps rather than metrics: its first line is an object with `input` and
    `output` (verl's dump) and no `data` (the file logger's)."""
    import json

    try:
        with open(path, "rb") as f:
            first = f.readline(1 << 20)
        record = json.loads(first)
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and "data" not in record and {"input", "output"} <= set(record)


def _metric_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and (p.suffix == ".jsonl" or p.name.startswith(TB_PREFIX))
                  and not any(part in ROLLOUT_DIRS for part in p.relative_to(folder).parts[:-1])
                  and not (p.suffix == ".jsonl" and is_rollout_dump(p)))


def metric_files(path: Path) -> list[Path]:
    """The metrics files of `path`: itself, or a folder's `*.jsonl` and TensorBoard event files (recursively),
    leaving out verl's rollout dumps (files under a `rollouts/` folder, or whose first line is a dump's)."""
    if path.is_dir():
        files = _metric_files(path)
        if not files:
            raise CompareError(f"{path}: a folder without metrics files (*.jsonl or {TB_PREFIX}.*; rollout dumps "
                               "are not metrics)")
        return files
    from verl_ebpo.tools.files import unreadable_reason

    reason = unreadable_reason(path, expected="a metrics file or folder")
    if reason:
        raise CompareError(f"{path}: {reason}")
    return [path]


_SEED_DIR = re.compile(r"^seed[_-]?([A-Za-z0-9][A-Za-z0-9_.-]*)$", re.IGNORECASE)
# the recipes' experiment folder, `$CKPTS_ROOT/$PROJECT_NAME/<model>-<algo>-g<G>-s<seed>[-<order>][-<protocol>]`
_RECIPE_DIR = re.compile(r"^(?P<model>.+)-(?P<algo>[A-Za-z0-9][A-Za-z0-9_.+]*)-g(?P<g>\d+)-s(?P<seed>\d+)(?P<rest>-.+)?$")
_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$", re.ASCII)
KNOWN_ORDER = ("grpo", "grpo_diff", "drgrpo", "drgrpo_diff", "dapo", "dapo_diff", "ebpo", "ebpo_diff", "ebpo_topic")
LAYOUTS = "ALGO/seedK/, seedK/ (one algorithm) or the recipes' <model>-<algo>-g<G>-s<seed>/"


def discover_runs(folder: str | Path) -> tuple[dict[tuple[str, str], list[str]], list[str]]:
    """((algo, seed) -> [run folder], one line per folder holding metrics that is not compared, saying why).

    Layouts (mixed freely): `ALGO/seedK/` (the demo's `runs/`; `seedK`, `seed_K`, `Seed-K`); `seedK/` at the top
    (the algorithm is the folder's name; not beside `ALGO/seedK/` folders, where its algorithm is unknown); the
    recipes' `<model>-<algo>-g<G>-s<seed>[-<order>][-<protocol>]/` (algorithm `<algo>` with the suffix, and
    `-g<G>` when the folder holds several G; several models are refused). Two folders of one ALGO@SEED and a
    folder with no run at all are a `CompareError`. Algorithms come in the order GRPO, Dr.GRPO, DAPO, EBPO, then
    others by name (without --baseline each difference is the later minus the earlier: EBPO minus the others)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CompareError(f"--runs {folder}: not a folder (give the folder holding ALGO/seedK/ run folders)")
    holders = sorted({f.parent.relative_to(folder).parts for f in _metric_files(folder)})
    nested = any(len(parts) > 1 and _SEED_DIR.match(parts[1]) for parts in holders)
    recipes = {parts[0]: m for parts in holders if parts for m in [_RECIPE_DIR.match(parts[0])] if m}
    models = sorted({m.group("model") for m in recipes.values()})
    if len(models) > 1:
        raise CompareError(f"--runs {folder}: runs of several models ({', '.join(models)}); give one model's runs "
                           "(--run ALGO@SEED=PATH for each)")
    several_g = len({m.group("g") for m in recipes.values()}) > 1
    found: dict[tuple[str, str], Path] = {}
    skipped: dict[Path, str] = {}
    for parts in holders:
        seed = _SEED_DIR.match(parts[0]) if parts else None
        if parts and parts[0] in recipes:
            m = recipes[parts[0]]
            algo = m.group("algo") + (f"-g{m.group('g')}" if several_g else "") + (m.group("rest") or "")
            key, run = (algo, m.group("seed")), folder / parts[0]
        elif seed and nested:
            skipped[folder / parts[0]] = "a seed folder beside ALGO/seedK/ folders has no algorithm (move it into one)"
            continue
        elif seed:
            key, run = (folder.name, seed.group(1)), folder / parts[0]
        elif len(parts) > 1 and _SEED_DIR.match(parts[1]):
            key, run = (parts[0], _SEED_DIR.match(parts[1]).group(1)), folder / parts[0] / parts[1]
        else:
            skipped[folder.joinpath(*parts)] = f"not a run folder of the layouts read ({LAYOUTS})"
            continue
        if not _LABEL.match(key[0]):
            skipped[run] = f"algorithm {key[0]!r}: a name of ASCII letters, digits and _.+- is needed (rename it)"
        elif found.setdefault(key, run) != run:
            raise CompareError(f"--runs {folder}: {found[key]} and {run} are both {key[0]}@{key[1]}; rename one")
    notes = [f"--runs: {path} not compared: {why}" for path, why in skipped.items()]
    if not found:
        raise CompareError(f"--runs {folder}: no runs found; the layouts read are {LAYOUTS} (docs/compare.md)"
                           + (f"; {notes[0]}" if notes else ""))
    rank = {a: i for i, a in enumerate(KNOWN_ORDER)}
    order = sorted(found, key=lambda k: (rank.get(k[0].split("-")[0].lower(), len(rank)), k[0],
                                         (0, int(k[1]), "") if k[1].isdigit() else (1, 0, k[1])))
    return {k: [str(found[k])] for k in order}, notes


def read_run(paths: list[str], warn: Callable[[str], None]) -> tuple[dict[int, dict], list[str]]:
    """One run from several files or folders: (step -> metrics as written, the files read). Files are applied in
    the order of their first step, so on a step held twice the later attempt (larger first step) wins. A file
    named twice (also through a link) is read once; two files starting at the same step are a `CompareError`."""
    parts = []
    files = list({os.path.realpath(f): f for p in paths for f in metric_files(Path(p))}.values())
    for f in files:
        steps = read_tensorboard(f) if f.name.startswith(TB_PREFIX) else verl_logs.read_metrics(f, warn)
        if not steps:
            warn(f"{f}: no metric lines")
            continue
        parts.append((min(steps), str(f), steps))
    parts.sort(key=lambda p: (p[0], p[1]))
    for (first, a, _), (second, b, _) in zip(parts, parts[1:]):
        if first == second:
            raise CompareError(f"{a} and {b} both start at step {first}: two runs under one ALGO@SEED (the attempts "
                               "of a resumed run start at later steps); give each run its own seed label")
    merged: dict[int, dict] = {}
    for _, _, steps in parts:
        merged.update(steps)  # a whole step replaced: the resumed attempt redid it
    return merged, [p[1] for p in parts]


def clean(merged: dict[int, dict]) -> tuple[dict[int, dict[str, float]], dict[str, dict[int, str]]]:
    """(step -> {metric: float} of the finite numbers only, metric -> {step: what the left-out value was})."""
    out: dict[int, dict[str, float]] = {}
    skipped: dict[str, dict[int, str]] = defaultdict(dict)
    for step, m in merged.items():
        out[step] = {}
        for key, v in m.items():
            f = float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) <= sys.float_info.max else math.nan
            if math.isfinite(f):
                out[step][key] = f
            else:
                skipped[key][step] = ("null (NaN or inf in verl's file logger)" if v is None else "NaN" if v != v
                                      else "infinite" if isinstance(v, float) else "not a number")
    return out, dict(skipped)


def skipped_summary(bad: dict[int, str]) -> str:
    """`{step: kind}` as "3 values (NaN at steps 4, 5; a list at step 7)"."""
    by_kind: dict[str, list[int]] = defaultdict(list)
    for step, kind in sorted(bad.items()):
        by_kind[kind].append(step)
    parts = [f"{kind} at step{'s' if len(st) > 1 else ''} {', '.join(map(str, st[:5]))}"
             + (f", ... ({len(st)} in all)" if len(st) > 5 else "") for kind, st in by_kind.items()]
    return f"{len(bad)} value{'s' if len(bad) > 1 else ''} ({'; '.join(parts)})"


@dataclass
class Run:
    """One run (one algorithm, one seed) as per-step arrays over its training steps."""

    algo: str
    seed: str
    steps: np.ndarray  # (n,) the training steps verl logged, ascending
    values: dict[str, np.ndarray] = field(default_factory=dict)  # metric -> (n,) values, NaN where not logged
    val: dict[str, dict[int, float]] = field(default_factory=dict)  # val metric -> step -> value (step 0 included)
    skipped: dict[str, dict[int, str]] = field(default_factory=dict)  # metric -> step -> what was not a number
    dapo: bool = False  # trains only on the groups it keeps (`is_dapo`)
    reward_all: Optional[np.ndarray] = None  # (n,) mean reward of all answers generated; None: unknown
    notes: list[str] = field(default_factory=list)  # what the report must say about this run (after its label)

    @property
    def label(self) -> str:
        return f"{self.algo}@{self.seed}"

    @property
    def answers(self) -> Optional[np.ndarray]:
        return self.values.get(ANSWERS)

    @property
    def cum_answers(self) -> np.ndarray:
        return np.cumsum(self.answers)


def answers_generated(m: dict, trained: float, group_size: Optional[int]) -> float:
    """Answers generated at a step: the `trained` ones plus DAPO's dropped and surplus groups x G (verl counts
    them in groups in `training/filter_groups/*`); a step with dropped groups and no `group_size` is an error."""
    groups = verl_logs.value(m, verl_logs.DAPO_EVICTED_GROUPS, 0.0) + verl_logs.value(m, verl_logs.DAPO_SURPLUS_GROUPS, 0.0)
    if groups and not group_size:
        raise CompareError("a DAPO run dropped groups (training/filter_groups/*): pass --group-size to count them")
    return trained + groups * (group_size or 0)


def is_val(key: str) -> bool:
    return key.startswith("val-")


def is_dapo(algo: str, metrics: dict[int, dict], dapo: Optional[set] = None) -> bool:
    """A run that trains only on the groups it keeps (DAPO's dynamic sampling): its ALGO is one given by `--dapo`
    (`dapo`), or the run recorded it: verl logged DAPO's group filter (`training/filter_groups/*`), or the plugin's
    replay buffer logged discarded answers (`replay/discarded_answers` > 0) at some step. Not from the name."""
    if algo in (dapo or ()):
        return True
    return any(k.startswith(DAPO_FILTER_PREFIX) or (k == verl_logs.DISCARDED_ANSWERS and v > 0)
               for m in metrics.values() for k, v in m.items())


def _series(metrics: dict[int, dict], steps, key: str) -> np.ndarray:
    return np.asarray([metrics[s].get(key, math.nan) for s in steps], dtype=np.float64)


def reward_all_answers(run: Run, metrics: dict[int, dict], batch_size: Optional[int],
                       group_size: Optional[int]) -> tuple[Optional[np.ndarray], Optional[str]]:
    """(per training step the mean reward of all answers generated, or None; why None). A run that trains on every
    answer it generates: verl's `critic/score/mean`. A DAPO run: (score x B x G + replay/discarded_reward_sum) /
    (B x G + replay/discarded_answers), as the demo computes it; without those metrics (or B and G) unknown."""
    steps = run.steps.tolist()
    score = _series(metrics, steps, verl_logs.SCORE)
    if not np.isfinite(score).any() or not run.dapo:
        return (score if np.isfinite(score).any() else None), None
    caveat = (f"DAPO's `{verl_logs.SCORE}` covers only the groups it kept, so it is not compared with other "
              f"algorithms', and the reward of all its answers (`{REWARD_ALL}`) ")
    answers, rewards = (_series(metrics, steps, k) for k in (verl_logs.DISCARDED_ANSWERS, verl_logs.DISCARDED_REWARD_SUM))
    have = np.isfinite(answers) & np.isfinite(rewards)
    if not have.any():
        return None, caveat + (f"is unknown (`{verl_logs.DISCARDED_ANSWERS}`, `{verl_logs.DISCARDED_REWARD_SUM}` not "
                               "logged: run DAPO with the plugin's replay buffer, docs/ordering.md#one-pass); compare "
                               "validation accuracy (`val-core/*`) instead")
    if not (batch_size and group_size):
        return None, caveat + "needs --batch-size and --group-size; or compare validation accuracy (`val-core/*`)"
    trained = float(batch_size * group_size)
    out = (score * trained + rewards) / (trained + np.where(answers >= 0, answers, math.nan))  # NaN: unknown
    return out, None if have.all() else (f"`{REWARD_ALL}` unknown at {(~have).sum()} of {len(have)} steps "
                                         f"(`{verl_logs.DISCARDED_ANSWERS}` or `{verl_logs.DISCARDED_REWARD_SUM}` "
                                         "not logged there)")


def run_series(algo: str, seed: str, metrics: dict[int, dict], keys: list[str], batch_size: Optional[int] = None,
               group_size: Optional[int] = None, skipped: Optional[dict[str, dict[int, str]]] = None,
               dapo: Optional[set] = None) -> Run:
    """`keys` (exact verl keys or `prefix/*` patterns) of a run's training steps (>= 1, not only validation)
    as arrays; validation metrics (`val-*`) kept per logged step. `metrics` holds finite floats only (`clean`);
    `skipped` (metric -> step -> what) the values left out, kept on the run for the keys wanted. With
    `batch_size` and `group_size` (B x G answers trained on per step) also `answers_generated` and, where the
    metrics tell it, `no_signal_share`; `reward_all_answers` (`reward_all_answers`) where it is known."""
    skipped = skipped or {}
    unread = {s for k, by_step in skipped.items() if not is_val(k) for s in by_step}  # logged, not a number
    train = sorted(s for s, m in metrics.items() if s >= 1 and (s in unread or any(not is_val(k) for k in m)))
    if not train:
        raise CompareError(f"{algo}@{seed}: no training-step metric lines")
    present = {k for s in train for k in metrics[s]} | {k for m in metrics.values() for k in m if is_val(k)}
    wanted = sorted({k for pat in keys for k in present if _match(pat, k)})
    run = Run(algo, seed, np.asarray(train, dtype=np.int64))
    run.skipped = {k: v for k, v in skipped.items() if any(_match(pat, k) for pat in keys)}
    for key in wanted:
        if is_val(key):
            run.val[key] = {s: m[key] for s, m in sorted(metrics.items()) if key in m}
        else:
            run.values[key] = _series(metrics, train, key)
    run.dapo = is_dapo(algo, metrics, dapo)
    run.reward_all, why = reward_all_answers(run, metrics, batch_size, group_size)
    if why:
        run.notes.append(why)
    if run.reward_all is not None and any(_match(pat, REWARD_ALL) for pat in keys):
        run.values[REWARD_ALL] = run.reward_all
    if batch_size and group_size:
        trained = float(batch_size * group_size)
        answers = np.asarray([answers_generated(metrics[s], trained, group_size) for s in train])
        dropped = answers - trained
        run.values[ANSWERS] = answers
        dapo = any(verl_logs.DAPO_EVICTED_GROUPS in metrics[s] or verl_logs.DAPO_SURPLUS_GROUPS in metrics[s]
                   for s in train)
        zero = _series(metrics, train, EBPO_ZERO)
        if np.isfinite(zero).any():
            run.values[NO_SIGNAL] = (zero * trained + dropped) / answers
        elif dapo:  # verl's filter trains only on groups with a learning signal
            run.values[NO_SIGNAL] = dropped / answers
    run.values = {k: v for k, v in run.values.items() if k == ANSWERS or any(_match(p, k) for p in keys)}
    return run


def _match(pattern: str, key: str) -> bool:
    return key.startswith(pattern[:-1]) if pattern.endswith("*") else key == pattern
