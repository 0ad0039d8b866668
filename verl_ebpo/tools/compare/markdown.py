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


def render(doc: dict, plots: list[str]) -> str:
    s = doc["settings"]
    algos = doc["algos"]
    lines = [
        "# verl-ebpo compare: " + " vs ".join(NAMES.get(a, a) for a in (algos or doc.get("eval", {}))),
        "",
        f"Runs: {', '.join(f'{a}@{seed}' for a, e in algos.items() for seed in e['seeds']) or 'none'}. "
        f"Final value: mean over each run's last {s['last']} logged steps (validation: the last validation; "
        "answers generated: the total). Intervals: 95% t intervals over seeds; differences paired by seed label.",
        "",
    ]
    if algos:
        lines += ["Steps logged per run: " + "; ".join(
            f"{a}: " + ", ".join(f"@{seed} {n}" for seed, n in e["steps"].items()) for a, e in algos.items()), ""]
    if doc.get("equal_budget_answers") is not None:
        lines += [f"Equal budget: {doc['equal_budget_answers']:.0f} answers (the smallest total any run generated); "
                  f"a run's value there is the answer-weighted mean over the last {s['last']} steps' worth of answers "
                  "before it.", ""]
    keys = list(dict.fromkeys(k for e in algos.values() for k in e["metrics"]))
    if keys:
        lines += ["| metric | algorithm | seeds | final | 95% CI | at equal budget | 95% CI |",
                  "|---|---|---|---|---|---|---|"]
        for k in keys:
            for algo, e in algos.items():
                m = e["metrics"].get(k)
                if not m:
                    continue
                b = m.get("at_equal_budget", {"final_mean": None, "ci95": [None, None]})
                lines.append(f"| `{k}` | {NAMES.get(algo, algo)} | {m['n']} | {_f(m['final_mean'])} | "
                             f"{_ci(m['ci95'])} | {_f(b['final_mean'])} | {_ci(b['ci95'])} |")
        lines.append("")
    if doc.get("eval"):
        lines += ["## Evaluation: Pass@1 (%)", "",
                  "Mean over seeds; 95% interval over both seeds and problems (`stats.crossed_mean_ci`).", "",
                  "| algorithm | benchmark | seeds | problems | Pass@1 | 95% CI |", "|---|---|---|---|---|---|"]
        for algo, benches in doc["eval"].items():
            for bench, e in benches.items():
                lines.append(f"| {NAMES.get(algo, algo)} | {bench} | {e['n']} | {e['problems']} | {e['mean']:.2f} | "
                             f"{_ci(e['ci95'])} |")
        lines.append("")
    sections = (("comparisons", "Differences at the final value"),
                ("comparisons_equal_budget", "Differences at an equal answer budget"),
                ("eval_comparisons", "Evaluation differences"))
    count = doc.get("number_of_comparisons", 0)
    every = [c["verdict"] for key, _ in sections for per in (doc.get(key) or {}).values() for c in per.values()]
    if every:
        asked = ", ".join(f"`{k}`" for k in s.get("verdict_metrics", [])) or "every metric"
        lines += [f"Compared between algorithms: {asked} (`--metric`); {count} comparisons, each a 95% interval not "
                  f"corrected for multiplicity; practical threshold (`--negligible`) {s['negligible']:g}."]
        note = wording.power_note(every)
        lines += ["", note, ""] if note else [""]
    for key, title in sections:
        if not doc.get(key):
            continue
        lines += [f"## {title}", ""]
        for name, per in doc[key].items():
            for c in per.values():
                lines.append(f"- {wording.short(c['verdict'])}")
        lines.append("")
    if doc.get("notes"):
        lines += ["## Notes", "", *[f"- {n}" for n in doc["notes"]], ""]
    lines += ["## Files", "", "- `comparison.json`: every number above, per seed too."]
    lines += [f"- `{p}`" for p in plots]
    return "\n".join(lines) + "\n"


def text_table(doc: dict, patterns) -> str:
    """The stdout summary: one row per metric matching `patterns` (in their order) and algorithm, with the mean
    over seeds, its 95% interval and the number of seeds (and the value at an equal answer budget where known)."""
    from verl_ebpo.tools.compare.runs import _match

    algos = doc["algos"]
    keys = list(dict.fromkeys(k for pat in patterns for e in algos.values() for k in e["metrics"] if _match(pat, k)))
    rows = [("metric", "algorithm", "seeds", "mean", "95% CI", "at equal budget")]
    for k in keys:
        for algo, e in algos.items():
            m = e["metrics"].get(k)
            if not m:
                continue
            b = m.get("at_equal_budget")
            budget = "" if not b or k == "answers_generated" else f"{_f(b['final_mean'])} {_ci(b['ci95'])}".strip()
            rows.append((k, NAMES.get(algo, algo), str(m["n"]), _f(m["final_mean"]), _ci(m["ci95"]), budget))
    if len(rows) == 1:
        return ""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)
