#!/usr/bin/env python3
"""The checkpoint the paper would evaluate: the saved step with the best validation Maj@16 (PROTOCOL=paper).

    python recipes/tools/best_checkpoint.py LOG --ckpt-dir $CKPTS_ROOT/verl_ebpo/qwen3_8b-ebpo_topic-g4

LOG is the training log: the JSONL of verl's `file` logger (`trainer.logger=[console,wandb,file]`; one
{"step": N, "data": {...}} a line) or the console output (lines "step:N - key:value - ..."; Ray's
"(TaskRunner pid=...)" prefixes are fine). The paper picks the best checkpoint of the topic runs by Maj@16
on a held-out validation set: with PROTOCOL=paper the runs validate on `dapo_math_holdout.parquet` with 16
samples (VAL_N) and verl logs `val-core/<data_source>/acc/maj@16/mean`.

Prints `global_step_<N>` (the best of the steps that have a checkpoint in --ckpt-dir, or of all validated
steps without it), its value, and on stderr the table of every candidate. Ties go to the earlier step.
A checkpoint counts only when its weights exist (global_step_N/actor/ with files: verl's rotation,
KEEP_CKPTS, deletes actor/ and leaves the folder); each one left out is named on stderr.
Reads only; exit 2 with one line on stderr when the log has no such metric or no validated step has a checkpoint.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path
from typing import Optional

DEFAULT_METRIC = r"val-core/[^/]+/acc/maj@16/mean"
_STEP = re.compile(r"(?:^|\s)step:(\d+)(?= - |$)")
_PAIR = re.compile(r" - ([^\s:]+):(\S+)")


class LogError(ValueError):
    pass


def _number(text) -> Optional[float]:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def read_metrics(path: Path) -> dict[int, dict[str, float]]:
    """step -> {metric: value} from a verl file-logger JSONL or a console log (later lines win)."""
    out: dict[int, dict[str, float]] = {}
    with open(path, errors="replace") as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(row, dict) and isinstance(row.get("data"), dict) and "step" in row:
                    values = {k: _number(v) for k, v in row["data"].items()}
                    out.setdefault(int(row["step"]), {}).update({k: v for k, v in values.items() if v is not None})
                continue
            m = _STEP.search(line)
            if m:
                values = {k: _number(v) for k, v in _PAIR.findall(line[m.start():])}
                out.setdefault(int(m.group(1)), {}).update({k: v for k, v in values.items() if v is not None})
    return out


def best_step(metrics: dict[int, dict[str, float]], metric: str, saved: Optional[set[int]]) -> tuple[int, float, list]:
    """(step, value, candidates): the step with the highest mean of the metrics matching `metric` (a regex
    over the whole key; several data sources are averaged), among `saved` steps when given."""
    pattern = re.compile(metric)
    candidates = []
    for step in sorted(metrics):
        values = [v for k, v in metrics[step].items() if pattern.fullmatch(k)]
        if values and (saved is None or step in saved):
            candidates.append((step, sum(values) / len(values)))
    if not candidates:
        where = "" if saved is None else f" at a step with a checkpoint ({len(saved)} saved)"
        raise LogError(f"no value of a metric matching {metric!r}{where}")
    step, value = max(candidates, key=lambda c: (c[1], -c[0]))
    return step, value, candidates


def saved_steps(ckpt_dir: Path, skipped: Optional[list] = None) -> set[int]:
    """The N of every global_step_N folder whose weights exist (an actor/ folder with at least one file in it).

    verl's rotation (trainer.max_actor_ckpt_to_keep, the recipes' KEEP_CKPTS) removes only global_step_N/actor/
    and leaves data.pt and ebpo_prior.json: such a folder cannot be evaluated. Each folder left out is appended
    to `skipped` as (N, reason)."""
    if not ckpt_dir.is_dir():
        raise LogError(f"--ckpt-dir {ckpt_dir}: not a folder")
    out = set()
    for p in sorted(ckpt_dir.glob("global_step_*")):
        tail = p.name.rsplit("_", 1)[1]
        if not tail.isdigit() or not p.is_dir():
            continue
        actor = p / "actor"
        if not actor.is_dir():
            reason = "no actor/ folder (removed by checkpoint rotation, or not a complete save)"
        elif not any(f.is_file() for f in actor.rglob("*")):
            reason = "actor/ holds no files"
        else:
            out.add(int(tail))
            continue
        if skipped is not None:
            skipped.append((int(tail), reason))
    return out


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("log", type=Path, help="verl's file-logger JSONL or the console log of the run")
    p.add_argument("--ckpt-dir", type=Path, default=None, help="trainer.default_local_dir: only its saved steps count")
    p.add_argument("--metric", default=DEFAULT_METRIC, help=f"regex over the metric name [{DEFAULT_METRIC}]")
    args = p.parse_args(argv)
    try:
        if not args.log.is_file():
            raise LogError(f"{args.log}: no such file")
        skipped: list = []
        saved = saved_steps(args.ckpt_dir, skipped) if args.ckpt_dir is not None else None
        for n, reason in sorted(skipped):
            print(f"best_checkpoint: skipped global_step_{n}: {reason}", file=sys.stderr)
        step, value, candidates = best_step(read_metrics(args.log), args.metric, saved)
    except (LogError, OSError, re.error) as e:
        print(f"best_checkpoint: error: {e}", file=sys.stderr)
        return 2
    for s, v in candidates:
        print(f"  step {s:>6}  {v:.4f}{'  <- best' if s == step else ''}", file=sys.stderr)
    where = f"\t{args.ckpt_dir / f'global_step_{step}'}" if args.ckpt_dir is not None else ""
    print(f"global_step_{step}\t{value:.4f}{where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
