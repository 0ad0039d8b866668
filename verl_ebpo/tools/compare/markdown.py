"""What `verl-ebpo compare` (and the demo) print and write as text, from comparison.json's content: report.md
(`render`), the stdout table (`text_table`) and the verdicts with the 80%-power explanation said once
(`verdict_lines`: each "not resolved" verdict of `stats.verdict` keeps its resolvable difference, its copy of
the explanation goes to one line after them)."""

from __future__ import annotations

import re

from verl_ebpo.tools.compare.plots import NAMES

_POWER = re.compile(r"\); these seeds would resolve a true difference of (±\S+) with (\d+(?:\.\d+)?)% power, so a "
                    r"smaller effect is not excluded\.$")


def verdict_lines(verdicts: list[str]) -> list[str]:
    """Each verdict without the power explanation ("...; resolvable at 80% power: ±0.146)."), then that
    explanation once when any verdict had it."""
    levels = "/".join(sorted({m.group(2) for v in verdicts for m in [_POWER.search(v)] if m}))
    note = (f"\"Not resolved\": the 95% interval covers 0. \"Resolvable at {levels}% power: ±d\": a true difference "
            f"of d or more would give an interval excluding 0 in {levels}% of repetitions with these seeds; a "
            "smaller effect is not excluded.")
    return [_POWER.sub(r"; resolvable at \2% power: \1).", v) for v in verdicts] + ([note] if levels else [])


def _f(x, digits: int = 4) -> str:
    if x is not None and abs(x) >= 10 ** digits:  # a count such as answers generated: 13,128, not 1.313e+04
        return f"{x:,.0f}"
    return "n/a" if x is None else f"{x:.{digits}g}"


def _cells(m) -> tuple[str, str]:
    """(mean, "[lo, hi]"); the interval is "" for a constant (the mean says it) and "no interval" without one."""
    if not m:
        return "", ""
    lo, hi = m["ci95"]
    return _f(m["final_mean"]), "no interval" if lo is None or hi is None else "" if lo == hi else f"[{_f(lo)}, {_f(hi)}]"


def _table(head: str, rows: list[tuple]) -> list[str]:
    return [head, "|" + "---|" * (head.count("|") - 1), *("| " + " | ".join(map(str, r)) + " |" for r in rows), ""]


def render(doc: dict, plots: list[str]) -> str:
    s, algos = doc["settings"], doc["algos"]
    lines = ["# verl-ebpo compare: " + " vs ".join(NAMES.get(a, a) for a in (algos or doc.get("eval", {}))), "",
             f"Final value: the mean of each run's last {s['last']} logged steps (validation: the last one; answers "
             "generated: the total). 95% t intervals over seeds; differences paired by seed.", ""]
    if doc.get("equal_budget_answers") is not None:
        lines += [f"Equal budget: {doc['equal_budget_answers']:,.0f} answers, the smallest total of any run.", ""]
    rows = [(f"`{k}`", NAMES.get(a, a), m["n"], *_cells(m), *_cells(m.get("at_equal_budget")))
            for k in dict.fromkeys(k for e in algos.values() for k in e["metrics"])
            for a, e in algos.items() for m in [e["metrics"].get(k)] if m]
    if rows:
        lines += _table("| metric | algorithm | seeds | final | 95% CI | at equal budget | 95% CI |", rows)
    if doc.get("eval"):
        lines += ["## Pass@1 (%)", "", "95% interval over seeds and problems (`stats.crossed_mean_ci`).", ""]
        lines += _table("| algorithm | benchmark | seeds | problems | Pass@1 | 95% CI |", [
            (NAMES.get(a, a), bench, e["n"], e["problems"], *_cells({**e, "final_mean": e["mean"]}))
            for a, benches in doc["eval"].items() for bench, e in benches.items()])
    sections = {"comparisons": "Differences at the final value", "comparisons_equal_budget": "Differences at an "
                "equal answer budget", "eval_comparisons": "Pass@1 differences"}
    verdicts = {key: [c["verdict"] for per in doc[key].values() for c in per.values()] for key in sections
                if doc.get(key)}
    said = verdict_lines([v for vs in verdicts.values() for v in vs])
    if verdicts:
        asked = ", ".join(f"`{k}`" for k in s.get("verdict_metrics", []))
        lines += [f"Compared: {asked}; {doc.get('number_of_comparisons', 0)} comparisons, not corrected for "
                  f"multiplicity; --negligible {s['negligible']:g}.", "", *(x for note in said[sum(map(len, verdicts.values())):] for x in (note, ""))]
    for key, vs in verdicts.items():
        lines += [f"## {sections[key]}", "", *(f"- {v}" for v in said[:len(vs)]), ""]
        said = said[len(vs):]
    if doc.get("notes"):
        lines += ["## Notes", "", *[f"- {n}" for n in doc["notes"]], ""]
    lines += ["## Files", "", "- `comparison.json`: every number above, per seed too.", *(f"- `{p}`" for p in plots)]
    return "\n".join(lines) + "\n"


def text_table(doc: dict, patterns) -> str:
    """The stdout summary: per metric matching `patterns` (in their order) and algorithm, the mean over seeds, its
    95% interval, the seeds and the value at an equal answer budget where known."""
    from verl_ebpo.tools.compare.runs import ANSWERS, _match

    algos = doc["algos"]
    keys = dict.fromkeys(k for pat in patterns for e in algos.values() for k in e["metrics"] if _match(pat, k))
    rows = [(k, NAMES.get(a, a), str(m["n"]), *_cells(m),
             " ".join(_cells(m.get("at_equal_budget") if k != ANSWERS else None)).strip())
            for k in keys for a, e in algos.items() for m in [e["metrics"].get(k)] if m]
    rows.insert(0, ("metric", "algorithm", "seeds", "mean", "95% CI", "at equal budget"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows) if keys else ""
