#!/usr/bin/env python3
"""Score generations JSONL files (recipes/eval/generate.py) and print the paper's table beside ours.

    python recipes/eval/score.py --model qwen3_8b --run grpo=gens_grpo.jsonl --run ebpo_topic=gens_topic.jsonl \
        --out-md table.md --out-json scores.json

- Each answer is judged by this package's reward, `verl_ebpo.rewards.compute_score` (the one the runs are
  trained with; imported only here), or by `--scorer module:function` with the same signature.
  `--protocol authors` judges with the authors' evaluation instead (authors_scorer.evaluation_score: their
  Minerva-normalised string match on the `Answer:` line) and labels our rows so.
  Whether a result means "correct" is `verl_ebpo.rewards.score.is_correct`, as in training and `label-difficulty`:
  the result's `acc` when it has one, else score > 0; a result with neither is an error.
- Pass@1 of a benchmark = 100 x the mean over problems of (correct samples / samples of that problem).
- Every problem must have the protocol's k samples (16; 4 for OlympiadBench; `--samples` to change) and
  every benchmark file row must be there once: a mismatch is an error unless --allow-partial.
- The table: one row per method, the paper's numbers (recipes/eval/paper_results.json: Table 1) and the
  authors' logged numbers (its `authors_logs`: their evaluation logs, file and commit in the notes) next to
  ours, in the paper's column order (MATH-500 / AIME24 / AIME25 / AMC23 / OlympiadBench / average).
  --run KEY=FILE with KEY a run script's method (grpo, drgrpo, dapo, ebpo, ebpo_topic, ebpo_diff) puts
  our row under the paper's; any other KEY is listed after them.
- --model is any recipes/<model>/ folder name: the paper's rows appear for the three models of Table 1
  (paper_results.json), any other model gets our rows alone. Without --model: our rows alone.
- --check-only: every check that does not need the generations (the model name, --samples, --run KEY=FILE
  syntax, every benchmark file of --data-dir present and readable, the scorer, the output paths), then exit 0;
  run_eval.sh runs it before it merges or generates anything. A --run file may not exist yet then.
- `--workers N`: N threads call the scorer, and the package's reward gets N verifier processes (its pool caps
  them at the CPUs; tools.scorer.sized_for). A tqdm bar per run on stderr (count, rate, time left) while it is
  scored; `--no-progress` turns it off.
- Files: --out-md and --out-json are checked before anything is scored (verl_ebpo.tools.files.check_output_paths):
  neither may be a --run file or a --data-dir benchmark file (also through links), a FIFO/device/folder, or the
  same file as the other. Writes are atomic. A bad --scorer (tools.scorer.load_scorer, the one loader) and every
  other error: one line on stderr, exit code 2.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmarks import BENCHMARKS, METHOD_TITLES, METHODS, MODEL_TITLES, SAMPLES, TITLES, parse_mapping  # noqa: E402

from verl_ebpo.tools.cli import one_line  # noqa: E402
from verl_ebpo.tools.files import atomic_write_text, check_output_paths, unreadable_reason  # noqa: E402
from verl_ebpo.rewards.score import is_correct  # noqa: E402  (the verdict training uses; one definition)
from verl_ebpo.tools.scorer import load_scorer, sized_for  # noqa: E402  (the one scorer loader: one-line errors)
from verl_ebpo.tools.compare import evals  # noqa: E402  (the one scoring implementation, shared with compare)
from verl_ebpo.tools.compare.evals import ScoreError, score_rows  # noqa: E402

PAPER_RESULTS = Path(__file__).resolve().parent / "paper_results.json"
DEFAULT_SCORER = evals.DEFAULT_SCORER
AUTHORS_SCORER = "authors_scorer:evaluation_score"  # recipes/eval/authors_scorer.py (this folder is on sys.path)
PROTOCOL_LABELS = {"paper": "ours", "authors": "ours (authors' eval)"}


def with_progress(scorer, total: int, desc: str, enabled: bool):
    """The scorer, counting its calls on a tqdm bar on stderr (count, rate, time left); the bar closes at the
    last answer. `enabled` False: the scorer itself."""
    if not enabled:
        return scorer
    import threading

    from tqdm import tqdm

    bar = tqdm(total=total, desc=desc, unit="answer", file=sys.stderr)
    lock = threading.Lock()  # --workers threads call it at once

    def counted(*args, **kwargs):
        try:
            return scorer(*args, **kwargs)
        finally:
            with lock:
                bar.update(1)
                if bar.n >= total:
                    bar.close()

    return counted


def average(scores: dict) -> Optional[float]:
    """Mean over the five benchmarks; None unless all five are there."""
    if not all(b in scores for b in BENCHMARKS):
        return None
    return sum(scores[b] for b in BENCHMARKS) / len(BENCHMARKS)


MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # a recipes/<model>/ folder name


def check_model(model: Optional[str]) -> None:
    """Any recipes/<model>/ folder name (or none); the paper's rows exist only for MODEL_TITLES."""
    if model is not None and not MODEL_NAME.fullmatch(model):
        raise ScoreError(f"--model must be a recipes/<model>/ folder name (letters, digits, _ . -), got {model!r}")


def check_benchmark_files(data_dir: Optional[str]) -> None:
    """--check-only: every benchmark parquet of --data-dir exists and is a readable parquet file."""
    if not data_dir:
        raise ScoreError("--check-only needs --data-dir (the benchmark files the generations will answer)")
    import pyarrow.parquet as pq

    for path in benchmark_inputs(data_dir):
        reason = unreadable_reason(path)
        if reason:
            raise ScoreError(f"benchmark file {path}: {reason} (recipes/data/prepare_data.py writes it)")
        try:
            pq.ParquetFile(path).metadata  # the footer: a damaged file fails here, named
        except Exception as e:  # pyarrow raises several kinds (ArrowInvalid, OSError, ...)
            raise ScoreError(f"benchmark file {path}: not a readable parquet file ({e})") from None


def paper_rows(model: Optional[str]) -> dict:
    return json.loads(PAPER_RESULTS.read_text())["models"].get(model, {}) if model else {}


def _cell(x: Optional[float]) -> str:
    return "–" if x is None else f"{x:.2f}"


def authors_log_rows(model: Optional[str]) -> dict:
    """method -> {"scores": [5 x Pass@1 %], "step", "file", "commit"}: the authors' logged evaluations."""
    if not model:
        return {}
    return json.loads(PAPER_RESULTS.read_text()).get("authors_logs", {}).get("models", {}).get(model, {})


def markdown_table(model: Optional[str], ours: dict, protocol: str = "paper") -> str:
    """ours: key -> {benchmark: pass@1}. Paper rows and the authors' logged rows from paper_results.json."""
    paper = paper_rows(model)
    logs = authors_log_rows(model)
    ours_label = PROTOCOL_LABELS[protocol]
    keys = [m for m in METHODS if m in paper or m in logs or m in ours] + [k for k in ours if k not in METHODS]
    title = MODEL_TITLES.get(model, model) if model else "the evaluated model"
    heading = (f"Pass@1 (%), {title}: the paper's numbers (arXiv 2602.05165, Table 1, G = 4), the authors' logged "
               f"evaluations (Tonyzhou98/verl, file and commit in the notes) and ours" if paper or logs
               else f"Pass@1 (%), {title}: ours (the paper has no numbers for this model)")
    lines = [
        heading,
        "",
        "| method | numbers | " + " | ".join(TITLES[b] for b in BENCHMARKS) + " | average |",
        "|---|---|" + "---:|" * (len(BENCHMARKS) + 1),
    ]
    notes = []
    for key in keys:
        name = METHOD_TITLES.get(key, key)
        if key in paper:
            p = paper[key]
            cells = [_cell(v) for v in p["scores"]] if p.get("scores") else ["–"] * len(BENCHMARKS)
            mark = ""
            if p.get("note"):
                notes.append(p["note"])
                mark = f" [{len(notes)}]"
            lines.append(f"| {name} | paper{mark} | " + " | ".join(cells) + f" | {_cell(p.get('average'))} |")
        if key in logs:
            g = logs[key]
            notes.append(f"the authors' log {g['file']} @ {g['commit'][:7]} (global_step_{g['step']}, their "
                         f"ebpo_eval.py{'; ' + g['note'] if g.get('note') else ''})")
            s = {b: v for b, v in zip(BENCHMARKS, g["scores"]) if v is not None}  # null: not read from the log
            cells = [_cell(s.get(b)) for b in BENCHMARKS]
            lines.append(f"| {name} | authors' log [{len(notes)}] | " + " | ".join(cells) + f" | {_cell(average(s))} |")
        if key in ours:
            s = ours[key]
            cells = [_cell(s.get(b)) for b in BENCHMARKS]
            lines.append(f"| {name} | {ours_label} | " + " | ".join(cells) + f" | {_cell(average(s))} |")
    if notes:
        lines.append("")
        lines += [f"[{i}] {n}" for i, n in enumerate(notes, 1)]
    return "\n".join(lines) + "\n"


def benchmark_inputs(data_dir: Optional[str]) -> list[Path]:
    """The benchmark parquet files problem_counts reads (outputs may not replace them)."""
    if not data_dir:
        return []
    return [Path(data_dir).expanduser() / f"{b}.parquet" for b in BENCHMARKS]


def problem_counts(data_dir: Optional[str]) -> Optional[dict]:
    if not data_dir:
        return None
    import pyarrow.parquet as pq

    return {f.stem: pq.ParquetFile(f).metadata.num_rows for f in benchmark_inputs(data_dir) if f.exists()}


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None, help="the recipes/<model>/ folder name; the paper's rows are shown for "
                                                  f"{', '.join(MODEL_TITLES)}")
    p.add_argument("--run", action="append", required=True, metavar="KEY=FILE",
                   help="a method's generations JSONL (repeatable); KEY: grpo, drgrpo, dapo, ebpo, ebpo_topic, ...")
    p.add_argument("--samples", default="", help="expected k per problem, e.g. math500=4 (default: the paper's)")
    p.add_argument("--data-dir", default=None, help="check that every problem of the benchmark files was answered")
    p.add_argument("--allow-partial", action="store_true", help="accept missing problems or samples")
    p.add_argument("--protocol", choices=sorted(PROTOCOL_LABELS), default="paper",
                   help="paper: judged by verl_ebpo.rewards; authors: by the authors' evaluation "
                        f"({AUTHORS_SCORER}); --scorer overrides either")
    p.add_argument("--scorer", default=None, help="module:function with verl's reward signature "
                                                   f"[{DEFAULT_SCORER}; --protocol authors: {AUTHORS_SCORER}]")
    p.add_argument("--workers", type=int, default=4,
                   help="threads calling the scorer, and as many verifier processes of the package's reward (up to "
                        "the CPUs; default 4)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--out-md", default=None, help="write the markdown table here (it is printed too)")
    p.add_argument("--out-json", default=None, help="write all numbers here")
    p.add_argument("--check-only", action="store_true", help="check everything but the generations, then exit")
    args = p.parse_args(argv)

    try:
        check_model(args.model)
        if args.workers < 1:
            raise ScoreError(f"--workers must be >= 1, got {args.workers}")
        samples = {**SAMPLES, **parse_mapping(args.samples)}
        runs = {}
        for item in args.run:
            key, sep, path = item.partition("=")
            if not sep or not key or not path:
                raise ScoreError(f"--run takes KEY=FILE, got {item!r}")
            if key in runs:
                raise ScoreError(f"--run {key} given twice")
            reason = unreadable_reason(path, allow_fifo=True)  # every run checked before the first is scored
            if reason and not (args.check_only and not os.path.lexists(path)):  # not generated yet
                raise ScoreError(f"--run {key}={path}: {reason}")
            runs[key] = path
        # every output is checked before any work (scoring takes minutes): not an input, not a FIFO/device/folder,
        # not inside an input folder, and --out-md and --out-json not one file (also through links)
        inputs = [*runs.values(), *benchmark_inputs(args.data_dir)]
        check_output_paths([args.out_md, args.out_json], inputs)
        if args.check_only:
            check_benchmark_files(args.data_dir)
        problems = problem_counts(args.data_dir)
        scorer = load_scorer(args.scorer or (AUTHORS_SCORER if args.protocol == "authors" else DEFAULT_SCORER))
        if args.check_only:
            rows = "the paper's rows" if paper_rows(args.model) else "no paper rows"
            print(f"score: checked: model {args.model or '-'} ({rows}), {len(runs)} run(s), scorer, "
                  f"{len(BENCHMARKS)} benchmark files, outputs", file=sys.stderr)
            return 0
        results, ours = {}, {}
        scorer = sized_for(scorer, args.workers)  # --workers verifier processes, not the pool's default
        for key, path in runs.items():
            rows = evals.read_generations(path, BENCHMARKS)
            correct = score_rows(rows, with_progress(scorer, len(rows), f"scoring {key}", not args.no_progress),
                                 args.workers)
            per = evals.pass_at_1(rows, correct, samples, problems, args.allow_partial, f"{path}: ",
                                  benchmarks=BENCHMARKS)
            results[key] = {"file": path, "benchmarks": per,
                            "average": average({b: v["pass@1"] for b, v in per.items()})}
            ours[key] = {b: v["pass@1"] for b, v in per.items()}
    except (ScoreError, ValueError, OSError) as e:  # OutputPathError and LabelingError are ValueErrors
        print(f"score: error: {one_line(e)}", file=sys.stderr)
        return 2
    finally:
        shutdown = getattr(sys.modules.get("verl_ebpo.rewards"), "shutdown", None)
        if shutdown:
            shutdown()

    table = markdown_table(args.model, ours, args.protocol)
    print(table, end="")
    try:  # checked before scoring; the writes check again (nothing swapped in meanwhile)
        if args.out_md:
            atomic_write_text(args.out_md, table, inputs=inputs)
        if args.out_json:
            doc = {"model": args.model, "protocol": args.protocol, "runs": results}
            atomic_write_text(args.out_json, json.dumps(doc, indent=2) + "\n",
                              inputs=[*inputs, *([args.out_md] if args.out_md else [])])
    except (ValueError, OSError) as e:
        print(f"score: error: {one_line(e)}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
