"""Reading what verl 0.9.1 writes during a run: the one place that knows verl's output formats.

- `read_metrics`: verl's file logger (`trainer.logger=[...,'file']`, path from `VERL_FILE_LOGGER_PATH`),
  one JSON line `{"step": N, "data": {...}}` per `Tracking.log` call; validation at step 0 has its own
  line, and the final validation shares the last step's number (lines of one step are merged).
- `validation_accuracy`: greedy accuracy from verl's validation metrics `val-core/<data source>/acc/mean@1`.
- `read_rollout_dumps` / `dump_group`: verl's rollout dump (`trainer.rollout_data_dir`), one JSON line per
  answer of step N in `N.jsonl`, whose `uid` is `<prompt uid>_<sample>_<output>` (the V1 replay buffer's
  trajectory key: the answers of one prompt share the `<prompt uid>` part).
- The metric names the CPU backend and the demo read (`SCORE`, `STEP_TIME`, DAPO's eviction counts, ...).
A verl upgrade that changes any of these formats is caught by `tests/test_cpu_demo.py::test_verl_logs_*` (known lines)
and the end-to-end tests (lines verl really wrote).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Callable, Optional

SCORE = "critic/score/mean"  # mean reward of the answers trained on this step
STEP_TIME = "timing_s/step"
# DAPO (algorithm.filter_groups) in verl's sync replay buffer, summed per step, counted in prompt groups:
DAPO_EVICTED_GROUPS = "training/filter_groups/evicted_samples"  # groups whose answers all scored the same
DAPO_SURPLUS_GROUPS = "training/filter_groups/discarded_surplus_samples"  # finished but not needed this step
# added to each training step's metrics by the plugin's replay buffer (verl_ebpo.samplers.replay, the same names;
# tests/test_samplers_replay.py): the answers generated for the step but not trained on (DAPO's dropped and surplus
# groups) and the sum of their rewards
DISCARDED_ANSWERS, DISCARDED_REWARD_SUM = "replay/discarded_answers", "replay/discarded_reward_sum"
_VAL_ACC = re.compile(r"^val-core/(.+)/acc/mean@1$")


def read_metrics(path: str | Path, warn: Optional[Callable[[str], None]] = None) -> dict[int, dict]:
    """step -> merged metrics of verl's file logger (a later line of a step updates the earlier ones).

    A line that is not `{"step": <integer>, "data": {...}}` is a ValueError naming file and line. A line that is
    not JSON at all (a run killed mid-write leaves a truncated last line) is one too, or, with `warn`, skipped
    after one call of `warn` naming file and line (`verl-ebpo compare` reads the rest). Values are returned as
    written (verl's file logger writes NaN and inf as null); checking them is the reader's part.
    """
    steps: dict[int, dict] = defaultdict(dict)
    with open(path, errors="replace") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:  # JSONDecodeError, or an integer of more than 4300 digits
                message = f"{path}:{number}: not a verl file-logger line (not JSON: {exc})"
                if warn is None:
                    raise ValueError(message) from None
                warn(message + ", skipped")
                continue
            if not (isinstance(record, dict) and type(record.get("step")) is int and record["step"] >= 0
                    and isinstance(record.get("data"), dict)):
                raise ValueError(f'{path}:{number}: not a verl file-logger line {{"step": N, "data": {{...}}}}: '
                                 f"{line.strip()[:60]}")
            steps[record["step"]].update(record["data"])
    return dict(steps)


def validation_accuracy(metrics: dict[int, dict]) -> dict[int, float]:
    """step -> greedy validation accuracy (verl's `val-core/<source>/acc/mean@1`; averaged over data sources)."""
    out = {}
    for step, m in metrics.items():
        values = [float(v) for k, v in m.items() if _VAL_ACC.match(k)]
        if values:
            out[step] = sum(values) / len(values)
    return out


def dump_group(uid: str) -> str:
    """The prompt (group) of a dumped answer: `<prompt uid>` of its uid `<prompt uid>_<sample>_<output>`
    (split from the right, as verl's dump sorts them); a uid of another shape is its own group."""
    parts = uid.rsplit("_", 2)
    return parts[0] if len(parts) == 3 else uid


def read_rollout_dumps(folder: str | Path) -> dict[int, list[dict]]:
    """step -> the answers verl dumped for that step (`trainer.rollout_data_dir`)."""
    out: dict[int, list[dict]] = {}
    for path in sorted(Path(folder).glob("*.jsonl")):
        if not path.stem.isdigit():
            continue
        with open(path) as f:
            out[int(path.stem)] = [json.loads(line) for line in f if line.strip()]
    return out


def group_scores(answers: list[dict]) -> dict[str, list[float]]:
    """prompt uid -> the scores of its answers, for one step's dumped answers."""
    groups: dict[str, list[float]] = defaultdict(list)
    for answer in answers:
        groups[dump_group(str(answer["uid"]))].append(float(answer["score"]))
    return dict(groups)


def value(metrics: dict, key: str, default: Optional[float] = None) -> Optional[float]:
    """A metric as a float (verl logs numpy scalars as JSON numbers), or `default` when absent."""
    v = metrics.get(key)
    return default if v is None else float(v)
