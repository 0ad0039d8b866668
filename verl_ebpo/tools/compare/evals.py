"""Scoring generations JSONL files (recipes/eval/generate.py): the one implementation behind
`recipes/eval/score.py` and `verl-ebpo compare --eval`.

- `read_generations(path, known)`: the rows; a line that is not JSON, a missing field, an index that is not an
  integer >= 0 or a benchmark outside `known` is a `ScoreError` naming file and line (the rest of a row is
  generate.py's own, and the reward judges what it is given).
- `score_rows(rows, scorer, workers, progress)`: each answer judged by `scorer` (verl's reward signature) and
  `verl_ebpo.rewards.score.is_correct` (the verdict training uses), on `workers` threads, with a tqdm bar on
  stderr when `progress`.
- `problem_rates(rows, correct, where)`: benchmark -> {problem index: share of its samples correct}, a sample
  given twice refused; `pass_at_1(...)`: 100 x the mean over problems, with the sample and problem
  counts checked against `samples` / `problems` unless `allow_partial`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Optional, Sequence

from verl_ebpo.rewards.score import is_correct

REQUIRED_FIELDS = ("benchmark", "problem_index", "sample_index", "ground_truth", "response")
DEFAULT_SCORER = "verl_ebpo.rewards:compute_score"


class ScoreError(ValueError):
    pass


def read_generations(path: str, known: Optional[Sequence[str]] = None) -> list[dict]:
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ScoreError(f"{path}:{n}: not JSON ({e})") from None
            missing = [k for k in REQUIRED_FIELDS if not isinstance(row, dict) or k not in row]
            if missing:
                raise ScoreError(f"{path}:{n}: missing field(s) {missing}")
            bad = [k for k in ("problem_index", "sample_index") if type(row[k]) is not int or row[k] < 0]
            if bad or not isinstance(row["response"], str):
                raise ScoreError(f"{path}:{n}: field {(bad or ['response'])[0]!r} must be "
                                 f"{'an integer >= 0' if bad else 'a string'}")
            if known is not None and row["benchmark"] not in known:
                raise ScoreError(f"{path}:{n}: unknown benchmark {row['benchmark']!r}; known: {', '.join(known)}")
            rows.append(row)
    if not rows:
        raise ScoreError(f"{path}: no generations")
    return rows


def score_rows(rows: list[dict], scorer: Callable, workers: int = 1, progress: bool = False,
               desc: str = "scoring") -> list[bool]:
    """Whether each row's answer is correct, in order; `workers` threads; `progress`: a tqdm bar on stderr."""
    import sys

    from tqdm import tqdm

    def one(row):
        return is_correct(scorer(data_source=row.get("data_source", row["benchmark"]), solution_str=row["response"],
                                 ground_truth=row["ground_truth"], extra_info={"benchmark": row["benchmark"]}))

    with ThreadPoolExecutor(workers) as pool:
        return list(tqdm(pool.map(one, rows), total=len(rows), desc=desc, unit="answer", disable=not progress,
                         file=sys.stderr))


def _by_problem(rows: list[dict], correct: list[bool], where: str = "") -> dict:
    """(benchmark, problem index) -> {sample index: correct}."""
    by_problem: dict = defaultdict(dict)
    for row, ok in zip(rows, correct):
        key = (row["benchmark"], int(row["problem_index"]))
        j = int(row["sample_index"])
        if j in by_problem[key]:
            raise ScoreError(f"{where}{row['benchmark']} problem {key[1]} sample {j} appears twice")
        by_problem[key][j] = ok
    return by_problem


def problem_rates(rows: list[dict], correct: list[bool], where: str = "") -> dict[str, dict[int, float]]:
    """benchmark -> {problem index: correct samples / samples} (no count checks)."""
    out: dict[str, dict[int, float]] = defaultdict(dict)
    for (bench, p), s in _by_problem(rows, correct, where).items():
        out[bench][p] = sum(s.values()) / len(s)
    return dict(out)


def pass_at_1(rows: list[dict], correct: list[bool], samples: dict, problems: Optional[dict] = None,
              allow_partial: bool = False, where: str = "", benchmarks: Optional[Sequence[str]] = None,
              required: Sequence[str] = ()) -> dict:
    """Per benchmark (in `benchmarks` order; default: as they first appear): pass@1 (%), problems, k,
    truncated share, mean response tokens. problems: benchmark -> number of problems expected; None: not checked.
    required: benchmarks this file must have rows for (compare: those another --eval file has; a file without
    them has 0 of their problems, refused unless `allow_partial`); any other benchmark without rows is skipped
    (score.py: a run evaluated on some benchmarks only)."""
    by_problem = _by_problem(rows, correct, where)
    extra: dict = defaultdict(lambda: {"length": 0, "tokens": 0, "n": 0})
    for row in rows:
        e = extra[row["benchmark"]]
        e["n"] += 1
        e["length"] += row.get("finish_reason") == "length"
        e["tokens"] += int(row.get("response_tokens") or 0)
    order = list(benchmarks) if benchmarks is not None else list(dict.fromkeys(r["benchmark"] for r in rows))
    out = {}
    for bench in order:
        keys = sorted(k for k in by_problem if k[0] == bench)
        if not keys:  # a benchmark the others have and this file lacks: 0 problems, a count like any other
            if bench in required and problems and problems.get(bench) and not allow_partial:
                raise ScoreError(f"{where}{bench}: no rows for this benchmark, which has {problems[bench]} problems "
                                 "(--allow-partial to accept)")
            continue
        ks = {len(by_problem[k]) for k in keys}
        if not allow_partial and ks != {samples[bench]}:
            raise ScoreError(f"{where}{bench}: samples per problem {sorted(ks)}, expected {samples[bench]} "
                             "(--samples to change, --allow-partial to accept)")
        if not allow_partial and problems and bench in problems and len(keys) != problems[bench]:
            raise ScoreError(f"{where}{bench}: {len(keys)} problems, the benchmark has {problems[bench]} "
                             "(--allow-partial to accept)")
        rates = [sum(by_problem[k].values()) / len(by_problem[k]) for k in keys]
        e = extra[bench]
        out[bench] = {
            "pass@1": 100.0 * sum(rates) / len(rates),
            "problems": len(keys),
            "k": sorted(ks) if len(ks) > 1 else ks.pop(),
            "truncated": e["length"] / e["n"],
            "mean_response_tokens": e["tokens"] / e["n"],
        }
    return out
