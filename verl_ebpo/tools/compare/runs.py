"""Reading runs for `verl-ebpo compare`: `ALGO@SEED=PATH`, verl's file-logger or TensorBoard files, merged by step.

- `parse_spec("grpo@1=PATH")` -> ("grpo", "1", "PATH"); a bad form is a `CompareError` (one line).
- `verl_logs.read_metrics(path, warn)`: verl's file logger, `{"step": N, "data": {...}}` per line (lines of one step merged);
  a line that is not such JSON is skipped with one warning naming the file and line number.
- `read_tensorboard(path)`: verl's `tensorboard` logger (event files), through TensorBoard's own
  `EventAccumulator`; without `tensorboard` installed, one line saying to `pip install tensorboard`.
- `read_run(paths, warn)`: one run from files and folders (one file per attempt of a resumed run), merged by step;
  where two files hold one step, the file whose first step is larger (the resumed attempt) wins the whole step.
- `run_series(...)`: a run's per-step arrays (training steps 1..N that verl logged), one per metric, plus
  the answers generated at each step (`answers_generated`, the demo's count: answers trained on plus DAPO's
  dropped and surplus groups times G) and the share of answers without learning signal where the metrics tell it.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from verl_ebpo.tools import verl_logs

ANSWERS = "answers_generated"  # derived: answers generated at a step (trained on + DAPO's dropped)
NO_SIGNAL = "no_signal_share"  # derived: share of the answers generated with advantage 0 or dropped
EBPO_ZERO = "ebpo/zero_adv_frac"
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


def metric_files(path: Path) -> list[Path]:
    """The metrics files of `path`: itself, or a folder's `*.jsonl` and TensorBoard event files (recursively)."""
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and (p.suffix == ".jsonl" or p.name.startswith(TB_PREFIX)))
        if not files:
            raise CompareError(f"{path}: a folder without metrics files (*.jsonl or {TB_PREFIX}.*)")
        return files
    from verl_ebpo.files import unreadable_reason

    reason = unreadable_reason(path, expected="a metrics file or folder")
    if reason:
        raise CompareError(f"{path}: {reason}")
    return [path]


def read_run(paths: list[str], warn: Callable[[str], None]) -> tuple[dict[int, dict], list[str]]:
    """One run from several files or folders: (step -> metrics, the files read). Files are applied in the order
    of their first step, so on a step held twice the later attempt (larger first step) wins."""
    parts = []
    files = [f for p in paths for f in metric_files(Path(p))]
    for f in dict.fromkeys(files):
        steps = read_tensorboard(f) if f.name.startswith(TB_PREFIX) else verl_logs.read_metrics(f, warn)
        if not steps:
            warn(f"{f}: no metric lines")
            continue
        parts.append((min(steps), str(f), steps))
    merged: dict[int, dict] = {}
    for _, _, steps in sorted(parts, key=lambda p: (p[0], p[1])):
        merged.update(steps)  # a whole step replaced: the resumed attempt redid it
    return merged, [p[1] for p in parts]


@dataclass
class Run:
    """One run (one algorithm, one seed) as per-step arrays over its training steps."""

    algo: str
    seed: str
    steps: np.ndarray  # (n,) the training steps verl logged, ascending
    values: dict[str, np.ndarray] = field(default_factory=dict)  # metric -> (n,) values, NaN where not logged
    files: list[str] = field(default_factory=list)
    val: dict[str, dict[int, float]] = field(default_factory=dict)  # val metric -> step -> value (step 0 included)

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


def run_series(algo: str, seed: str, metrics: dict[int, dict], keys: list[str], batch_size: Optional[int] = None,
               group_size: Optional[int] = None) -> Run:
    """`keys` (exact verl keys or `prefix/*` patterns) of a run's training steps (>= 1, not only validation)
    as arrays; validation metrics (`val-*`) kept per logged step. With `batch_size` and `group_size`
    (B x G answers trained on per step) also `answers_generated` and, where the metrics tell it, `no_signal_share`."""
    train = sorted(s for s, m in metrics.items() if s >= 1 and any(not is_val(k) for k in m))
    if not train:
        raise CompareError(f"{algo}@{seed}: no training-step metric lines")
    present = {k for s in train for k in metrics[s]} | {k for m in metrics.values() for k in m if is_val(k)}
    wanted = sorted({k for pat in keys for k in present if _match(pat, k)})
    run = Run(algo, seed, np.asarray(train, dtype=np.int64))
    for key in wanted:
        if is_val(key):
            run.val[key] = {s: float(m[key]) for s, m in sorted(metrics.items()) if key in m}
        else:
            run.values[key] = np.asarray([verl_logs.value(metrics[s], key, math.nan) for s in train], dtype=np.float64)
    if batch_size and group_size:
        trained = float(batch_size * group_size)
        answers = np.asarray([answers_generated(metrics[s], trained, group_size) for s in train])
        dropped = answers - trained
        run.values[ANSWERS] = answers
        dapo = any(verl_logs.DAPO_EVICTED_GROUPS in metrics[s] or verl_logs.DAPO_SURPLUS_GROUPS in metrics[s]
                   for s in train)
        zero = np.asarray([verl_logs.value(metrics[s], EBPO_ZERO, math.nan) for s in train])
        if np.isfinite(zero).any():
            run.values[NO_SIGNAL] = (zero * trained + dropped) / answers
        elif dapo:  # verl's filter trains only on groups with a learning signal
            run.values[NO_SIGNAL] = dropped / answers
    return run


def _match(pattern: str, key: str) -> bool:
    return key.startswith(pattern[:-1]) if pattern.endswith("*") else key == pattern
