"""Difficulty labels: a model's pass rate per prompt over its sampled answers (rollouts JSONL), scored with
`verl_ebpo.rewards.compute_score` or any `module:function` (`verl_ebpo.tools.scorer.load_scorer`).

`label_difficulty(table, rollouts_path, ...)` returns the table with the pass rate and stats; `verl-ebpo
label-difficulty` (`cli.py`) is its command line. An index is an integer row number, or with `index_field` an
integer or text value of that field (a bool or a float is refused: true == 1 and 2.0 == 2 would match by accident).
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections import Counter
from typing import Any, Callable

from verl_ebpo.tools.scorer import load_scorer, sized_for
from verl_ebpo.samplers.ordering import is_missing
from verl_ebpo.tools.cli import one_line
from verl_ebpo.tools.labeling.io import (
    _SHOW,
    LabelingError,
    check_count,
    check_destination,
    open_text_input,
    read_or_default,
    rows_error,
)


def _is_index_value(key: Any) -> bool:
    """A value an index can be matched on: an integer or text. Not a bool or a float (true == 1 and 2.0 == 2 would
    match rows by accident), nor a list/dict/array from a nested field."""
    return type(key) in (int, str)  # values read from JSON or an Arrow table: Python types


def _describe(value: Any) -> str:
    return f"a {type(value).__name__} ({one_line(repr(value))[:80]})"


def read_rollouts(
    path: str, num_rows: int, index_of: dict | None = None, index_field: str | None = None
) -> dict[int, list[str]]:
    """{row: [response, ...]} from a JSONL file of {"index": ..., "response": ...} lines; `index_of` maps an
    --index-field value (named `index_field` in errors) to its row, else the index is the row number."""
    if not os.path.lexists(path):
        raise LabelingError(f"rollouts file not found: {path}")
    out: dict[int, list[str]] = {}
    with open_text_input(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise LabelingError(f"{path}:{lineno}: not JSON ({e.msg})") from e
            if not isinstance(rec, dict):
                raise LabelingError(f"{path}:{lineno}: expected a JSON object, got {type(rec).__name__}")
            key = rec.get("index", rec.get("prompt_index"))
            if key is None or "response" not in rec:
                raise LabelingError(f"{path}:{lineno}: a line needs 'index' and 'response' (has {sorted(rec)})")
            if index_of is not None:
                field = f"index_field={index_field!r}" if index_field else "the index field"
                if not _is_index_value(key):
                    raise LabelingError(f"{path}:{lineno}: index is {_describe(key)}, which cannot match a value "
                                        f"of {field}; write the row's {field} value (an integer or a string)")
                if key not in index_of:
                    raise LabelingError(f"{path}:{lineno}: index {key!r} matches no row's value of {field}")
                row = index_of[key]
            else:
                if isinstance(key, bool) or not isinstance(key, int) or not 0 <= key < num_rows:
                    raise LabelingError(f"{path}:{lineno}: index {key!r} is not a row number 0..{num_rows - 1}")
                row = key
            resp = rec["response"]
            if not isinstance(resp, str):
                raise LabelingError(f"{path}:{lineno}: 'response' must be a string, got {type(resp).__name__}")
            out.setdefault(row, []).append(resp)
    return out


def label_difficulty(
    table,
    rollouts_path: str,
    *,
    field: str = "extra_info.difficulty",
    scorer: Callable[..., Any] | None = None,
    ground_truth_field: str = "reward_model.ground_truth",
    data_source_field: str = "data_source",
    index_field: str | None = None,
    missing: str = "error",
    workers: int = 1,
    progress: bool = True,
    overwrite: bool = False,
    max_scorer_errors: int = 0,
):
    """Pass rate per prompt = correct / sampled answers. Returns (table, stats dict).

    An answer that makes the scorer raise is a set-up error (a broken verifier would otherwise turn easy prompts
    into 0.0): more than `max_scorer_errors` of them raise LabelingError with their count and the first one;
    up to that many are counted as wrong and reported in stats.
    """
    from verl_ebpo.samplers.fields import read_field
    from verl_ebpo.tools.labeling.fields import set_field

    check_count("workers", workers)
    check_count("max_scorer_errors", max_scorer_errors, 0)
    check_destination(table, field, overwrite)
    n = table.num_rows
    index_of = None
    if index_field:
        keys = read_field(table, index_field)
        index_of = {}
        dup = []
        for i, key in enumerate(keys):
            if not _is_index_value(key):
                raise LabelingError(
                    f"index_field={index_field!r}: row {i} holds {_describe(key)}, which cannot match a rollout's "
                    "'index'; choose a field of integers or strings (e.g. extra_info.index), or omit index_field "
                    "to match row numbers"
                )
            if key in index_of:
                dup.append(i)
            index_of[key] = i
        if dup:
            raise rows_error(f"repeat a value of {index_field!r}", dup, n, "the index field must be unique")
    answers = read_rollouts(rollouts_path, n, index_of, index_field)
    truths = read_field(table, ground_truth_field)
    sources = read_field(table, data_source_field)
    extras = read_or_default(table, "extra_info", None)
    no_truth = sorted(i for i in answers if is_missing(truths[i]))
    if no_truth:
        raise rows_error(f"have rollouts but no {ground_truth_field!r}", no_truth, n, "fix the input file")
    score = sized_for(scorer or load_scorer(None), workers)  # `workers` verifier processes (up to the CPUs)
    from verl_ebpo.rewards.score import is_correct  # the verdict training uses (one definition)

    jobs = [(i, r) for i in sorted(answers) for r in answers[i]]
    correct = Counter()
    failures: list[tuple[int, str]] = []

    def run(job):
        i, resp = job
        try:
            return i, is_correct(score(data_source=sources[i], solution_str=resp, ground_truth=truths[i],
                                       extra_info=extras[i])), None
        except Exception as e:  # counted and reported, scored as wrong
            return i, False, f"{type(e).__name__}: {e}"

    from concurrent.futures import ThreadPoolExecutor

    from tqdm import tqdm

    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(tqdm(pool.map(run, jobs), total=len(jobs), desc="scoring rollouts", unit="answer",
                            disable=not progress, file=sys.stderr))
    for i, ok, err in results:
        correct[i] += int(ok)
        if err is not None:
            failures.append((i, err))
    if len(failures) > max_scorer_errors:
        row, err = failures[0]
        raise LabelingError(
            f"{len(failures)} of {len(jobs)} answers made the scorer raise (first: row {row}: {one_line(err)[:300]}); "
            "the pass rates would be wrong. Fix the scorer, or pass max_scorer_errors=N to count up to N such "
            "answers as wrong"
        )

    rates: list[float | None] = [None] * n
    for i, resp in answers.items():
        rates[i] = correct[i] / len(resp)
    unscored = [i for i in range(n) if rates[i] is None]
    stats: dict[str, Any] = {"rows": n, "answers": len(jobs), "scorer_errors": len(failures)}
    if unscored:
        if missing == "error":
            raise rows_error("have no rollouts", unscored, n, "sample them, or pass missing=drop|keep")
        if missing == "drop":
            keep = [i for i in range(n) if rates[i] is not None]
            table = table.take(keep)
            rates = [rates[i] for i in keep]
            stats["dropped_rows"] = len(unscored)
        elif missing == "keep":
            stats["rows_without_rollouts"] = len(unscored)
        else:
            raise LabelingError(f"missing={missing!r} is not one of ['error', 'drop', 'keep']")
    table = set_field(table, field, rates)
    counts = sorted(len(v) for v in answers.values())
    scored = [r for r in rates if r is not None]
    stats.update(
        {
            "prompts_scored": len(scored),
            "answers_per_prompt": {"min": counts[0], "median": counts[len(counts) // 2], "max": counts[-1]}
            if counts
            else {},
            "mean_pass_rate": (sum(scored) / len(scored)) if scored else math.nan,
            "always_solved": sum(1 for r in scored if r == 1.0),
            "never_solved": sum(1 for r in scored if r == 0.0),
            "first_scorer_errors": failures[:_SHOW],
        }
    )
    return table, stats
