"""`verl-ebpo compare`: algorithms over seeds from what verl and the recipes write, with intervals. See docs/compare.md.

    verl-ebpo compare --runs runs/demo/runs --batch-size 16 --group-size 4 --out DIR     # ALGO/seedK/ folders
    verl-ebpo compare --run grpo@1=RUN --run grpo@2=RUN --run ebpo@1=RUN --run ebpo@2=RUN \\
        [--eval grpo@1=GENERATIONS.jsonl ...] [--baseline grpo] [--last 10] --out DIR

Prints a table (mean and 95% interval per algorithm and metric) and the verdicts of the metrics asked for
(`--metric`; default the reward of all answers and validation accuracy), the 80%-power explanation once.

Writes to DIR only comparison.json, report.md, training_reward.png and validation_accuracy.png (a plot not drawn
this time is removed, so that DIR never mixes two comparisons).
`verl-ebpo demo` computes its statistics and curves through the same modules (`report`, `plots`) and writes
this command's files beside its own.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable, Optional

DEFAULT_METRICS = ("critic/score/mean", "reward_all_answers", "val-core/*", "response_length/mean", "actor/entropy",
                   "no_signal_share", "answers_generated", "timing_s/step", "ebpo/*")
VERDICT_METRICS = ("reward_all_answers", "val-core/*")  # compared between algorithms unless --metric says otherwise
# the stdout table's rows (besides the --metric ones); report.md and comparison.json hold every metric
TABLE_METRICS = ("reward_all_answers", "critic/score/mean", "val-core/*", "no_signal_share", "answers_generated")


def _number(flag: str, text: Optional[str], lo: float, hi: float, kind=int):
    """`text` of `flag` as `kind` in [lo, hi] (None stays None); else a one-line `CompareError`."""
    from verl_ebpo.tools.compare.runs import CompareError

    try:
        v = None if text is None else kind(text)
    except ValueError:
        v = float("nan")
    if v is not None and not lo <= v <= hi:
        what = f"an integer in [{lo}, {hi}]" if kind is int else f"a finite number >= {lo:g}"
        raise CompareError(f"{flag} must be {what}, got {text!r}")
    return v


def add_arguments(p: argparse.ArgumentParser) -> None:
    add = p.add_argument
    add("--runs", action="append", default=[], metavar="DIR", help="a folder of runs (ALGO/seedK/, seedK/ or the "
        "recipes' <model>-<algo>-g<G>-s<seed>/); repeatable; a path that does not exist is read as a glob")
    add("--run", action="append", default=[], metavar="ALGO@SEED=PATH",
        help="verl's file-logger JSONL, a TensorBoard event file or a folder of them; repeatable")
    add("--dapo", action="append", default=[], metavar="ALGO", help="algorithms that train only on the groups "
        "they keep (DAPO), when their runs did not log training/filter_groups/*")
    add("--metric", default=",".join(VERDICT_METRICS), metavar="KEY,...",
        help="metrics compared between algorithms; prefix/* for a family (default: %(default)s)")
    add("--eval", action="append", default=[], metavar="ALGO@SEED=FILE", help="generations JSONL of "
        "recipes/eval/generate.py")
    add("--baseline", default=None, help="compare every other algorithm to this one (default: every pair)")
    add("--last", default="10", help="final value: mean of each run's last K logged steps, 1..100000 (default 10)")
    add("--metrics", default=",".join(DEFAULT_METRICS), metavar="KEY,...",
        help="metrics summarised per algorithm (default: see docs/compare.md)")
    add("--negligible", default="0", help="a resolved difference below this is negligible; >= 0 (default 0)")
    add("--batch-size", default=None, help="prompts per step (data.train_batch_size), 1..10^6")
    add("--group-size", default=None, help="answers per prompt (actor_rollout_ref.rollout.n), 1..4096")
    add("--samples", default="", metavar="BENCH=K,...", help="expected samples per problem (default: the most seen)")
    add("--allow-partial", action="store_true", help="accept generations with missing problems or samples")
    add("--scorer", default=None, help="module:function with verl's reward signature (default: the package's)")
    add("--workers", default="4", help="scorer threads and verifier processes, 1..256 (default 4)")
    add("--out", required=True, help="output folder (only this command's files are written)")
    add("--format", default="png", choices=("png", "pdf", "svg"), help="figure format (default: png)")
    add("--quiet", action="store_true", help="print only the output folder")


def _specs(items: list[str], flag: str) -> dict[tuple[str, str], list[str]]:
    from verl_ebpo.tools.compare.runs import parse_spec

    out: dict[tuple[str, str], list[str]] = {}
    for item in items:
        algo, seed, path = parse_spec(item, flag)
        out.setdefault((algo, seed), []).append(path)
    return out


def _parse_samples(text: str) -> dict[str, int]:
    from verl_ebpo.tools.compare.runs import CompareError

    pairs = [part.partition("=") for part in filter(None, (t.strip() for t in text.split(",")))]
    bad = [f"{n}{sep}{k}" for n, sep, k in pairs if not sep or not k.isdigit() or int(k) < 1]
    if bad:
        raise CompareError(f"--samples takes BENCH=K,... with K >= 1, got {bad[0]!r}")
    return {n: int(k) for n, _, k in pairs}


def score_evals(specs: dict, scorer_name: Optional[str], samples: dict, allow_partial: bool, workers: int,
                progress: bool = False) -> tuple:
    """--eval files scored once each: (rates algo->seed->bench->{problem: share}, pass1 algo->seed->bench->...)."""
    from collections import Counter

    from verl_ebpo.tools.compare import evals
    from verl_ebpo.tools.scorer import load_scorer, sized_for

    scorer = sized_for(load_scorer(scorer_name), workers)
    read = {key: ([r for p in paths for r in evals.read_generations(p)], f"{', '.join(paths)}: ")
            for key, paths in specs.items()}
    try:
        scored = {key: (rows, evals.score_rows(rows, scorer, workers, progress, f"scoring {key[0]}@{key[1]}"), where)
                  for key, (rows, where) in read.items()}
    finally:
        shutdown = getattr(sys.modules.get("verl_ebpo.rewards"), "shutdown", None)
        if shutdown:
            shutdown()
    rates, pass1, seen, problems = {}, {}, {}, {}
    for (algo, seed), (rows, correct, where) in scored.items():
        rates.setdefault(algo, {})[seed] = evals.problem_rates(rows, correct, where)
        for bench, per in rates[algo][seed].items():
            problems[bench] = max(problems.get(bench, 0), len(per))
        for row in rows:
            seen.setdefault(row["benchmark"], set()).add((row["problem_index"], row["sample_index"]))
    unknown = sorted(set(samples) - set(seen))
    if unknown:
        raise evals.ScoreError(f"--samples names {', '.join(unknown)}, which no --eval file has (benchmarks: "
                               f"{', '.join(sorted(seen))})")
    expected = {b: samples.get(b, max(Counter(p for p, _ in pairs_).values())) for b, pairs_ in seen.items()}
    for (algo, seed), (rows, correct, where) in scored.items():
        # every benchmark of any file, so that one a file lacks is a count of 0 problems, checked like the others
        pass1.setdefault(algo, {})[seed] = evals.pass_at_1(rows, correct, expected, problems, allow_partial, where,
                                                           benchmarks=list(problems), required=list(problems))
    return rates, pass1


def _check_run_set(run_specs: dict) -> None:
    """One metrics file belongs to one run: the same file (also through a link, or inside a folder given) under two
    ALGO@SEED labels is a `CompareError`."""
    from verl_ebpo.tools.compare.runs import CompareError, metric_files

    owner: dict = {}
    for (algo, seed), paths in run_specs.items():
        for path in paths:
            for f in metric_files(Path(path)):
                st = f.stat()
                other = owner.setdefault((st.st_dev, st.st_ino), (f"{algo}@{seed}", f))
                if other[0] != f"{algo}@{seed}":
                    raise CompareError(f"--run {algo}@{seed}={path}: {f} is also read as {other[0]} ({other[1]}); "
                                       "one metrics file is one run, give each run its own file")


def _check_metrics(metrics: tuple, runs: dict, seen: set, batch_size: Optional[int], group_size: Optional[int],
                   flag: str = "--metrics") -> None:
    """Every pattern of an explicit --metrics (or --metric) matches some metric of some run (CompareError naming it)."""
    import difflib

    from verl_ebpo.tools.compare.runs import ANSWERS, NO_SIGNAL, REWARD_ALL, CompareError, _match

    derived = {k for rs in runs.values() for r in rs for k in r.values} | {REWARD_ALL, ANSWERS, NO_SIGNAL}
    for pat in metrics:
        if any(_match(pat, k) for k in seen | {k for rs in runs.values() for r in rs for k in (*r.values, *r.val)}):
            continue
        if pat in (ANSWERS, NO_SIGNAL) and not (batch_size and group_size):
            hint = ": it needs --batch-size and --group-size"
        elif pat == REWARD_ALL:
            hint = ": the runs' notes say why (see a run without --metrics)"
        else:
            close = difflib.get_close_matches(pat, sorted(seen | derived), n=3, cutoff=0.6)
            hint = f"; close: {', '.join(close)}" if close else ""
        raise CompareError(f"{flag} {pat!r} matches no metric of any run{hint}")


def compare(run_specs: dict, eval_specs: dict, out: Path, *, last: int = 10, baseline: Optional[str] = None,
            metrics: tuple = DEFAULT_METRICS, negligible: float = 0.0, batch_size: Optional[int] = None,
            group_size: Optional[int] = None, samples: Optional[dict] = None, allow_partial: bool = False,
            scorer: Optional[str] = None, workers: int = 4, progress: bool = False,
            warn: Callable[[str], None] = lambda m: print(f"verl-ebpo compare: warning: {m}", file=sys.stderr),
            verdict_metrics: tuple = VERDICT_METRICS, dapo: tuple = (), fmt: str = "png",
            views: Optional[tuple] = None, skipped: tuple = ()) -> dict:
    """The whole command: read, compare, write comparison.json, report.md and the figures into `out`; returns the doc.
    `metrics` (summarised) and `verdict_metrics` (compared between algorithms; read too) other than their defaults
    must each match a metric; `dapo`: algorithms taken as DAPO whatever they logged; `fmt`: the figures' format;
    `views`: the figures drawn (default all of `plots.VIEWS`; the demo draws its own reward figure); `progress`:
    tqdm bars on stderr."""
    from verl_ebpo.tools.files import atomic_write_text, check_output_path
    from verl_ebpo.tools.compare import markdown, report, runs as runs_mod
    from verl_ebpo.tools.compare.runs import CompareError

    algos = list(dict.fromkeys([a for a, _ in run_specs] + [a for a, _ in eval_specs]))
    if baseline is not None and baseline not in algos:
        raise CompareError(f"--baseline {baseline!r} is not among the algorithms given ({', '.join(algos)})")
    if not run_specs and not eval_specs:
        raise CompareError("nothing to compare: give --run ALGO@SEED=PATH and/or --eval ALGO@SEED=FILE")
    inputs = [p for paths in [*run_specs.values(), *eval_specs.values()] for p in paths]
    if not str(out).strip():
        raise CompareError(f"--out must name a folder, got {str(out)!r}")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise CompareError(f"--out {out} exists and is not a folder")
    from verl_ebpo.tools.compare.plots import plot_names

    unknown_dapo = sorted(set(dapo) - {a for a, _ in run_specs})
    if unknown_dapo:
        raise CompareError(f"--dapo {', '.join(unknown_dapo)}: no such algorithm among the runs "
                           f"({', '.join(dict.fromkeys(a for a, _ in run_specs))})")
    asked = [(flag, tuple(p)) for flag, p, default in (("--metrics", metrics, DEFAULT_METRICS),
                                                       ("--metric", verdict_metrics, VERDICT_METRICS))
             if tuple(p) != default]  # patterns given explicitly: each must match some metric
    if tuple(verdict_metrics) != VERDICT_METRICS:  # --metric given: read too
        metrics = tuple(dict.fromkeys((*metrics, *verdict_metrics)))
    for name in ("comparison.json", *plot_names(fmt), "report.md"):
        check_output_path(out / name, inputs)
    _check_run_set(run_specs)
    notes: list[str] = []

    def note(message: str) -> None:
        notes.append(message)
        warn(message)

    for message in skipped:  # --runs folders holding metrics that are not compared
        note(message)
    if run_specs and not (batch_size and group_size):
        notes.append("answers generated and the equal-budget comparison need --batch-size and --group-size")
    runs: dict[str, list] = {}
    seen: set = set()
    used = (runs_mod.EBPO_ZERO, *runs_mod.DAPO_INPUTS)
    for (algo, seed), paths in run_specs.items():
        raw, _ = runs_mod.read_run(paths, note)
        if not raw:
            raise CompareError(f"{algo}@{seed}: no metric lines in {', '.join(paths)}")
        metrics_by_step, unread = runs_mod.clean(raw)
        seen |= {k for m in raw.values() for k in m}
        for key, bad in unread.items():
            if any(runs_mod._match(p, key) for p in (*metrics, *used)):
                note(f"{algo}@{seed}: `{key}`: {runs_mod.skipped_summary(bad)} skipped, not finite numbers")
        run = runs_mod.run_series(algo, seed, metrics_by_step, list(metrics), batch_size, group_size, unread, set(dapo))
        runs.setdefault(algo, []).append(run)
    for flag, patterns in asked if runs else ():
        _check_metrics(patterns, runs, seen, batch_size, group_size, flag)
    doc = report.compare_runs(runs, list(metrics), last, baseline, negligible, verdict_metrics) if runs else {
        "algos": {}, "comparisons": {}, "comparisons_equal_budget": {}, "equal_budget_answers": None,
        "number_of_comparisons": 0, "notes": []}
    doc["eval"], doc["eval_comparisons"] = {}, {}
    if eval_specs:
        rates, pass1 = score_evals(eval_specs, scorer, samples or {}, allow_partial, workers, progress)
        doc["eval"], doc["eval_comparisons"], eval_notes = report.eval_summary(rates, pass1, baseline, negligible)
        doc["notes"] += eval_notes
        doc["number_of_comparisons"] += sum(len(v) for v in doc["eval_comparisons"].values())
    doc["notes"] = notes + doc["notes"]
    doc["settings"] = {"last": last, "baseline": baseline, "metrics": list(metrics), "negligible": negligible,
                       "verdict_metrics": list(verdict_metrics), "dapo": sorted(dapo),
                       "batch_size": batch_size, "group_size": group_size, "allow_partial": allow_partial,
                       "runs": {f"{a}@{s}": p for (a, s), p in run_specs.items()},
                       "evals": {f"{a}@{s}": p for (a, s), p in eval_specs.items()}}
    out.mkdir(parents=True, exist_ok=True)
    from verl_ebpo.tools.compare.plots import write_plots

    plots: list[str] = []
    try:
        plots = write_plots(runs, out, fmt=fmt, **({} if views is None else {"views": views})) if runs else []
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] != "matplotlib":
            raise
        doc["notes"].append("plots skipped: matplotlib is not installed (pip install 'verl-ebpo[cpu]')")
    for stale in [out / n for f in ("png", "pdf", "svg") for n in plot_names(f) if n not in plots]:  # earlier ones
        if stale.is_file() and not stale.is_symlink():
            stale.unlink()
    atomic_write_text(out / "comparison.json",
                      json.dumps(report.json_safe(doc), indent=2, allow_nan=False) + "\n", inputs=inputs)
    atomic_write_text(out / "report.md", markdown.render(report.json_safe(doc), plots), inputs=inputs)
    return doc


def _names(values: list[str]) -> tuple:
    return tuple(dict.fromkeys(v.strip() for item in values for v in item.split(",") if v.strip()))


def _folders(patterns: list[str]) -> list[str]:
    """--runs values: each an existing path taken literally (`runs[v2]`), else a glob of folders (matching one)."""
    import glob

    from verl_ebpo.tools.compare.runs import CompareError

    out = []
    for pat in patterns:
        found = [pat] if Path(pat).exists() or not glob.has_magic(pat) else sorted(
            p for p in glob.glob(pat) if Path(p).is_dir())
        if not found:
            raise CompareError(f"--runs {pat}: the pattern matches no folder")
        out += found
    return out


def run_specs_of(runs: list[str], folders: list[str]) -> tuple[dict, list[str]]:
    """((algo, seed) -> paths from --run flags and --runs folders, the notes on folders not compared); a run found
    twice (by two folders, or by a folder and a --run) is one run merged by step, as a repeated --run is."""
    from verl_ebpo.tools.compare.runs import discover_runs

    specs, notes = _specs(runs, "--run"), []
    for folder in _folders(folders):
        found, skipped = discover_runs(folder)
        notes += skipped
        for key, paths in found.items():
            specs.setdefault(key, []).extend(p for p in paths if p not in specs.get(key, []))
    return specs, notes


def run(args: argparse.Namespace) -> int:
    from verl_ebpo.tools.cli import one_line
    from verl_ebpo.tools.compare import markdown
    from verl_ebpo.tools.compare.runs import CompareError

    try:
        metrics, verdict_metrics = _names([args.metrics]), _names([args.metric])
        for flag, names in (("--metrics", metrics), ("--metric", verdict_metrics)):
            if not names:
                raise CompareError(f"{flag} must name at least one metric")
        nums = {flag: _number(flag, text, *bounds) for flag, text, bounds in (
            ("--last", args.last, (1, 100000)), ("--negligible", args.negligible, (0, sys.float_info.max, float)),
            ("--batch-size", args.batch_size, (1, 10**6)), ("--group-size", args.group_size, (1, 4096)),
            ("--workers", args.workers, (1, 256)))}
        specs, skipped = run_specs_of(args.run, args.runs)
        doc = compare(specs, _specs(args.eval, "--eval"), args.out, skipped=skipped,
                      last=nums["--last"], baseline=args.baseline, metrics=metrics, negligible=nums["--negligible"],
                      batch_size=nums["--batch-size"], group_size=nums["--group-size"],
                      samples=_parse_samples(args.samples), allow_partial=args.allow_partial, scorer=args.scorer,
                      workers=nums["--workers"], progress=not args.quiet, verdict_metrics=verdict_metrics,
                      dapo=_names(args.dapo), fmt=args.format)
    except (ValueError, OSError) as exc:  # CompareError, ScoreError, OutputPathError: ValueErrors
        print(f"verl-ebpo compare: error: {one_line(exc)}", file=sys.stderr)
        return 2
    if not args.quiet:
        verdicts = [c["verdict"] for per in (doc["comparisons"], doc.get("comparisons_equal_budget", {}),
                                              doc["eval_comparisons"]) for cs in per.values() for c in cs.values()]
        lines = [markdown.text_table(doc, (*verdict_metrics, *TABLE_METRICS)),
                 *(f"  {line}" for line in markdown.verdict_lines(verdicts)),
                 f"  {doc['number_of_comparisons']} comparisons (95% intervals, not corrected for multiplicity)"]
        print("\n".join(line for line in lines if line.strip()))
    print(f"verl-ebpo compare: wrote {Path(args.out) / 'report.md'}")
    return 0
