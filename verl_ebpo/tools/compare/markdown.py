"""report.md of `verl-ebpo compare`, from comparison.json's content."""

from __future__ import annotations

from verl_ebpo.tools.compare import wording
from verl_ebpo.tools.compare.plots import NAMES


def _f(x, digits: int = 4) -> str:
    if x is not None and abs(x) >= 10 ** digits:  # a count such as answers generated: 13,128, not 1.313e+04
        return f"{x:,.0f}"
    return "n/a" if x is None else f"{x:.{digits}g}"


def _ci(pair) -> str:
    """"[lo, hi]"; "no interval"; "" for a constant (the same value in every seed: the mean says it)."""
    lo, hi = pair
    return "no interval" if lo is None or hi is None else "" if lo == hi else f"[{_f(lo)}, {_f(hi)}]"


def _cells(m) -> tuple[str, str]:
    return (_f(m["final_mean"]), _ci(m["ci95"])) if m else ("", "")


def _table(head: str, rows: list[tuple]) -> list[str]:
    cols = head.count("|") - 1
    return [head, "|" + "---|" * cols, *("| " + " | ".join(map(str, r)) + " |" for r in rows), ""]


def render(doc: dict, plots: list[str]) -> str:
    s, algos = doc["settings"], doc["algos"]
    lines = ["# verl-ebpo compare: " + " vs ".join(NAMES.get(a, a) for a in (algos or doc.get("eval", {}))), "",
             f"Final value: the mean of each run's last {s['last']} logged steps (validation: the last one; answers "
             "generated: the total). 95% t intervals over seeds; differences paired by seed.", ""]
    if algos:
        lines += ["Steps per run: " + ", ".join(f"{a}@{seed} {n}" for a, e in algos.items()
                                                 for seed, n in e["steps"].items()) + ".", ""]
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
            (NAMES.get(a, a), bench, e["n"], e["problems"], f"{e['mean']:.2f}", _ci(e["ci95"]))
            for a, benches in doc["eval"].items() for bench, e in benches.items()])
    sections = {"comparisons": "Differences at the final value", "comparisons_equal_budget": "Differences at an "
                "equal answer budget", "eval_comparisons": "Pass@1 differences"}
    every = [c["verdict"] for key in sections for per in (doc.get(key) or {}).values() for c in per.values()]
    if every:
        asked = ", ".join(f"`{k}`" for k in s.get("verdict_metrics", []))
        lines += [f"Compared: {asked}; {doc.get('number_of_comparisons', 0)} comparisons, not corrected for "
                  f"multiplicity; --negligible {s['negligible']:g}.", ""]
        lines += [wording.power_note(every), ""] if wording.power_note(every) else []
    for key, title in sections.items():
        if doc.get(key):
            lines += [f"## {title}", "", *(f"- {wording.short(c['verdict'])}" for per in doc[key].values()
                                           for c in per.values()), ""]
    if doc.get("notes"):
        lines += ["## Notes", "", *[f"- {n}" for n in doc["notes"]], ""]
    lines += ["## Files", "", "- `comparison.json`: every number above, per seed too.", *(f"- `{p}`" for p in plots)]
    return "\n".join(lines) + "\n"


def text_table(doc: dict, patterns) -> str:
    """The stdout summary: per metric matching `patterns` (in their order) and algorithm, the mean over seeds, its
    95% interval, the seeds and the value at an equal answer budget where known."""
    from verl_ebpo.tools.compare.runs import _match

    algos = doc["algos"]
    keys = dict.fromkeys(k for pat in patterns for e in algos.values() for k in e["metrics"] if _match(pat, k))
    rows = [(k, NAMES.get(a, a), str(m["n"]), *_cells(m),
             " ".join(_cells(m.get("at_equal_budget") if k != "answers_generated" else None)).strip())
            for k in keys for a, e in algos.items() for m in [e["metrics"].get(k)] if m]
    rows.insert(0, ("metric", "algorithm", "seeds", "mean", "95% CI", "at equal budget"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows) if keys else ""
