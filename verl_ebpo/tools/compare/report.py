"""Statistics of `verl-ebpo compare` (also the demo's): final values, equal answer budgets, intervals over seeds,
paired differences and verdicts (`verl_ebpo.tools.stats`), and comparison.json's `algos`/`comparisons` parts.

- final value of a metric in one run: the mean of its last `last` logged values (the run's own steps); for
  validation metrics (`val-*`, logged every `test_freq` steps) the last logged value (the final validation);
  for `answers_generated` the run's total. A value that was not a finite number (NaN, null, ...) still takes its
  place in the window: the mean is over the finite ones there, and a note names run, metric and steps; a last
  validation that was not a number leaves the run without a final value (never an earlier validation instead).
- `critic/score/mean` of a DAPO run covers only the groups it kept: it is never paired with another kind of
  algorithm's (the comparison is `reward_all_answers`, where known).
- equal budget: the smallest total of answers any run generated; a run's value there is the answer-weighted
  mean over the steps whose cumulative answers end in (budget - window, budget], window = `last` x the
  fewest answers of one step (`at_budget`).
- per algorithm: mean over seeds and its 95% t interval; per pair: the paired difference over the seed labels
  both have, its t interval, the verdict (`stats.classify`) and the half-width (the smallest difference these
  seeds resolve).
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np

from verl_ebpo.tools.compare.plots import NAMES
from verl_ebpo.tools.compare.runs import ANSWERS, Run, _match, skipped_summary
from verl_ebpo.tools.verl_logs import SCORE
from verl_ebpo.tools.stats import Interval, classify, mean_ci, paired_diff_ci, verdict


def at_budget(values: np.ndarray, answers: np.ndarray, budget: float, window: float) -> float:
    """Mean of `values` (weighted by `answers`, both (steps,)) over the steps whose cumulative answer count ends
    in (budget - window, budget]; if none does, the last step within the budget, or the first step when that
    alone exceeds it (a run too short to compare at equal budget)."""
    cum = np.cumsum(answers)
    pick = (cum <= budget) & (cum > budget - window)
    if not pick.any():
        within = np.nonzero(cum <= budget)[0]
        pick = np.zeros_like(pick)
        pick[within[-1] if within.size else 0] = True
    return float(np.average(values[pick], weights=answers[pick]))


def budget_window(answers: Sequence[np.ndarray], tail: int) -> tuple[float, float]:
    """(equal budget, window): the smallest total any run generated, and `tail` x the fewest answers of a step."""
    return min(float(np.sum(a)) for a in answers), tail * min(float(np.min(a)) for a in answers)


def paired(a: dict, b: dict) -> tuple[Optional[Interval], list]:
    """Paired difference a - b over the seed labels both have (dicts seed -> value; None values skipped)."""
    seeds = [s for s in a if s in b and a[s] is not None and b[s] is not None]
    if not seeds:
        return None, []
    return paired_diff_ci([a[s] for s in seeds], [b[s] for s in seeds]), seeds


def diff_entry(a: str, b: str, diff: Interval, seeds: list, what: str, negligible: float) -> dict:
    return {"diff": diff.mean, "ci95": diff.as_list(), "n": diff.n, "seeds": seeds,
            "verdict": verdict(NAMES.get(a, a), NAMES.get(b, b), diff, what, negligible=negligible),
            "class": classify(diff, negligible), "half_width": None if diff.n < 2 else abs(diff.half)}


def final(run: Run, key: str, last: int) -> tuple[Optional[float], Optional[str]]:
    """(the final value of `key` in `run`, or None; a note when values that were not finite numbers fall in the
    final window, or the last validation was one)."""
    bad = run.skipped.get(key, {})
    if key.startswith("val-"):
        logged: dict = {**run.val.get(key, {}), **{s: None for s in bad}}
        if not logged:
            return None, None
        step = max(logged)
        if logged[step] is None:
            return None, (f"{run.label}: the last validation of `{key}` (step {step}) is {bad[step]}, not a finite "
                          "number: no final value for this run")
        return logged[step], None
    v = run.values.get(key)
    if v is None:
        return None, None
    if key == ANSWERS:
        return float(np.sum(v)), None
    steps = run.steps.tolist()
    good = {s: float(x) for s, x in zip(steps, v.tolist()) if math.isfinite(x)}
    window = sorted(set(good) | {s for s in bad if s >= 1})[-last:]
    values = [good[s] for s in window if s in good]
    lost = {s: bad[s] for s in window if s not in good}
    note = None
    if lost:
        rest = f"final value over the other {len(values)}" if values else "no final value for this run"
        note = (f"{run.label}: `{key}` was not a finite number in its final window (last {len(window)} logged "
                f"steps): {skipped_summary(lost)}; {rest}")
    return (float(np.mean(values)) if values else None), note


def budget_value(run: Run, key: str, budget: float, window: float) -> Optional[float]:
    v = run.values.get(key)
    ok = np.isfinite(v) if v is not None and key != ANSWERS else np.zeros(0, bool)
    return at_budget(v[ok], run.answers[ok], budget, window) if ok.any() else None


def pairs(algos: list[str], baseline: Optional[str]) -> list[tuple[str, str]]:
    """(algo, baseline) pairs: every other algorithm against `baseline`; without one, every pair once, the
    later-listed algorithm minus the earlier one."""
    if baseline:
        return [(a, baseline) for a in algos if a != baseline]
    return [(algos[j], algos[i]) for j in range(len(algos)) for i in range(j)]


def run_notes(all_runs: list[Run], last: int) -> list[str]:
    """What the report must say about the run set: step ranges that do not overlap, `last` beyond a run's length,
    and each run's own notes (DAPO's reward)."""
    notes: list[str] = []
    ranges = {r.label: (int(r.steps[0]), int(r.steps[-1])) for r in all_runs}
    if len(all_runs) > 1 and max(a for a, _ in ranges.values()) > min(b for _, b in ranges.values()):
        notes.append("the runs' step ranges do not all overlap (" + ", ".join(f"{k} steps {a}..{b}" for k, (a, b)
                     in ranges.items()) + "): each final value is from its own run's end, curves against steps "
                     "are drawn where the seeds of an algorithm share steps")
    short = [f"{r.label} ({len(r.steps)})" for r in all_runs if len(r.steps) < last]
    if short:
        notes.append(f"--last {last} is more than the logged steps of {', '.join(short)}: their final values are "
                     "means over the whole run")
    by_text: dict[str, list[str]] = {}  # one note for the runs that share it (e.g. every seed of DAPO)
    for r in all_runs:
        for text in r.notes:
            by_text.setdefault(text, []).append(r.label)
    notes += [f"{', '.join(labels)}: {text}" for text, labels in by_text.items()]
    return notes


def missing_notes(runs: dict[str, list[Run]], present: list[str]) -> list[str]:
    """One note per set of runs lacking some metrics, a family named once: "`ebpo/*` (12 metrics) are missing
    from grpo@1, grpo@2: compared where present"."""
    by_runs: dict[tuple, dict[str, list[str]]] = {}
    for k in present:
        missing = tuple(r.label for rs in runs.values() for r in rs if k not in r.values and k not in r.val)
        if missing:
            by_runs.setdefault(missing, {}).setdefault(k.split("/", 1)[0] + "/*" if "/" in k else k, []).append(k)
    return [", ".join(f"`{fam}` ({len(ks)} metrics)" if len(ks) > 1 else f"`{ks[0]}`" for fam, ks in fams.items())
            + f" {'is' if sum(map(len, fams.values())) == 1 else 'are'} missing from {', '.join(missing)}: compared "
            "where present" for missing, fams in by_runs.items()]


def compare_runs(runs: dict[str, list[Run]], keys: list[str], last: int, baseline: Optional[str] = None,
                 negligible: float = 0.0, verdict_keys: Optional[Sequence[str]] = None) -> dict:
    """comparison.json's `algos`, `comparisons`, `comparisons_equal_budget`, `equal_budget_answers`, `notes`.
    `keys` (patterns): the metrics summarised per algorithm; `verdict_keys` (patterns; default `keys`): those of
    them compared between algorithms (paired differences and verdicts)."""
    notes: list[str] = []
    logged = [k for rs in runs.values() for r in rs for k in (*r.values, *r.val)]
    present = list(dict.fromkeys(k for pat in keys for k in sorted(set(logged)) if _match(pat, k)))
    compared = [k for k in present if any(_match(pat, k) for pat in (keys if verdict_keys is None else verdict_keys))]
    notes += missing_notes(runs, present)
    all_runs = [r for rs in runs.values() for r in rs]
    notes += run_notes(all_runs, last)
    budget = window = None
    if all(r.answers is not None for r in all_runs):
        budget, window = budget_window([r.answers for r in all_runs], last)
    finals: dict[str, dict[str, dict]] = {k: {} for k in present}
    budgets: dict[str, dict[str, dict]] = {k: {} for k in present}
    algos = {}
    for algo, rs in runs.items():
        entry = {"seeds": [r.seed for r in rs], "steps": {r.seed: int(len(r.steps)) for r in rs}, "metrics": {}}
        if len(rs) == 1:
            notes.append(f"{algo}: one seed ({rs[0].seed}), means without intervals")
        for k in present:
            per_seed = {}
            for r in rs:
                value, note = final(r, k, last)
                if note:
                    notes.append(note)
                if value is not None:
                    per_seed[r.seed] = value
            finals[k][algo] = per_seed
            if not per_seed:
                continue
            m = _entry(per_seed)
            if budget is not None:
                at = {r.seed: v for r in rs for v in [budget_value(r, k, budget, window)] if v is not None}
                budgets[k][algo] = at
                if at:
                    m["at_equal_budget"] = _entry(at)
            entry["metrics"][k] = m
        algos[algo] = entry
    dapo = {algo: any(r.dapo for r in rs) for algo, rs in runs.items()}
    comparisons, at_budget_cmp = {}, {}
    for a, b in pairs(list(runs), baseline):
        name = f"{a}-{b}"
        for k in compared:
            if k == SCORE and dapo[a] != dapo[b]:
                notes.append(f"{name}: `{SCORE}` not compared (DAPO's covers only the groups it kept); compare "
                             "`reward_all_answers` (all answers generated) or validation accuracy")
                continue
            for store, table, what in ((comparisons, finals, _what(k, last)),
                                       (at_budget_cmp, budgets, f"{k} at an equal budget of {budget or 0:.0f} answers")):
                diff, seeds = paired(table[k].get(a, {}), table[k].get(b, {}))
                if diff is None:
                    continue
                unpaired = sorted(set(table[k][a]) ^ set(table[k][b]))
                if unpaired and store is comparisons:
                    notes.append(f"{name} on `{k}`: seeds {', '.join(unpaired)} have no partner; paired over "
                                 f"{', '.join(seeds)}")
                store.setdefault(name, {})[k] = diff_entry(a, b, diff, seeds, what, negligible)
    made = sum(len(v) for per in (comparisons, at_budget_cmp) for v in per.values())
    return {"algos": algos, "comparisons": comparisons, "comparisons_equal_budget": at_budget_cmp,
            "equal_budget_answers": budget, "number_of_comparisons": made, "notes": list(dict.fromkeys(notes))}


def _entry(per_seed: dict) -> dict:
    ci = mean_ci(list(per_seed.values()))
    return {"final_mean": ci.mean, "ci95": ci.as_list(), "n": ci.n, "per_seed": per_seed}


def _what(key: str, last: int) -> str:
    if key.startswith("val-"):
        return f"{key} (last validation)"
    if key == ANSWERS:
        return "answers generated (total)"
    return f"{key} (mean of the last {last} steps)"


def json_safe(obj):
    """`obj` with every non-finite float (NaN, inf) replaced by None, so the JSON is strict."""
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    return int(obj) if isinstance(obj, np.integer) else obj


def clip01(pair: list) -> list:
    """An interval of a proportion clipped to [0, 1] (None bounds kept)."""
    return [None if v is None else min(1.0, max(0.0, v)) for v in pair]


def eval_summary(rates: dict[str, dict[str, dict[str, dict[int, float]]]], pass1: dict[str, dict[str, dict]],
                 baseline: Optional[str] = None, negligible: float = 0.0) -> tuple[dict, dict, list[str]]:
    """Pass@1 (%) over seeds per algorithm and benchmark, and paired differences between algorithms.

    rates: algo -> seed -> benchmark -> {problem: share correct}; pass1: algo -> seed -> benchmark -> Pass@1 (%).
    The interval (`stats.crossed_mean_ci`) counts both seed and problem sampling, over the problems every seed
    answered (all of them unless --allow-partial). Returns (eval, eval_comparisons, notes)."""
    from verl_ebpo.tools.stats import crossed_mean_ci

    notes: list[str] = []

    def table(bench: str, seeds: list[str], a: str, b: Optional[str] = None):
        """(problems every seed answered, (seeds, problems) Pass@1 in %, of `a` or of `a` minus `b`)."""
        common = sorted(set.intersection(*(set(rates[x][s].get(bench, {})) for x in {a, b or a} for s in seeds)))
        return common, np.asarray([[100.0 * (rates[a][s][bench][p] - (rates[b][s][bench][p] if b else 0.0))
                                    for p in common] for s in seeds])

    out: dict = {}
    for algo, by_seed in rates.items():
        seeds = list(by_seed)
        for bench in dict.fromkeys(b for s in seeds for b in by_seed[s]):
            have = [s for s in seeds if bench in by_seed[s]]
            if len(have) < len(seeds):  # only with --allow-partial (otherwise refused when scored)
                notes.append(f"eval {algo} {bench}: seeds {', '.join(s for s in seeds if s not in have)} have no rows "
                             f"for it; over seeds {', '.join(have)}")
            problems, x = table(bench, have, algo)
            if not problems:
                notes.append(f"eval {algo} {bench}: no problem answered by every seed")
                continue
            ci = crossed_mean_ci(x)
            out.setdefault(algo, {})[bench] = {
                "mean": ci.mean, "ci95": ci.as_list(), "n": ci.n, "problems": len(problems),
                "per_seed": {s: pass1[algo][s][bench]["pass@1"] for s in have}}
            if len(have) == 1:
                notes.append(f"eval {algo} {bench}: one seed, Pass@1 without interval")
    comparisons: dict = {}
    for a, b in pairs(list(rates), baseline):
        for bench in set(out.get(a, {})) & set(out.get(b, {})):
            seeds = [s for s in rates[a] if s in rates[b] and bench in rates[a][s] and bench in rates[b][s]]
            common, d = table(bench, seeds, a, b) if seeds else ([], None)
            if common:
                comparisons.setdefault(f"{a}-{b}", {})[bench] = diff_entry(
                    a, b, crossed_mean_ci(d), seeds, f"{bench} Pass@1 (%, paired by seed and problem)", negligible)
    return out, comparisons, notes
