"""The docs' blocks of a `verl-ebpo demo` run, rendered from its summary.json alone.

The committed run is docs/results/demo_default/summary.json; `python -m verl_ebpo.tools.results_docs` writes
these blocks into README.md (`readme`) and docs/demo.md (`doc`), and tests/test_docs_numbers.py checks that the
docs quote that file. Any algorithms and seeds a summary holds render; a summary has no command line, so the
command is rebuilt from its `settings` (`command`).
"""

from __future__ import annotations

import math

from verl_ebpo.tools.compare.plots import NAMES
from verl_ebpo.tools.demo.options import DemoOptions

# the options that change what a run computes or how long it takes (not where it writes or what it prints)
FLAGS = ("algos", "steps", "batch_size", "group_size", "lr", "max_response_length", "temperature", "parallel")


def command(settings: dict) -> str:
    """The `verl-ebpo demo` command line that makes a run of `settings` (flags only where not the default)."""
    default = DemoOptions()
    argv = ["verl-ebpo", "demo"]
    seeds = list(settings.get("seeds", default.seed_list))
    if settings.get("quick"):
        argv.append("--quick")
    elif seeds != default.seed_list:
        if seeds != list(range(len(seeds))):
            raise ValueError(f"settings.seeds {seeds}: the demo runs seeds 0..N-1")
        argv += ["--seeds", str(len(seeds))]
    for key in FLAGS:
        if key not in settings:
            continue
        value, base = settings[key], getattr(default, key)
        if key == "algos":
            value = tuple(value)
        if value != base:
            shown = ",".join(value) if key == "algos" else f"{value:g}" if isinstance(value, float) else str(value)
            argv += ["--" + key.replace("_", "-"), shown]
    return " ".join(argv)


def _f(x, digits: int = 3) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _ci(pair, digits: int = 3) -> str:
    lo, hi = pair
    return "" if lo is None or hi is None else f" [{lo:.{digits}f}, {hi:.{digits}f}]"


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


def _order(summary: dict) -> list[str]:
    """The algorithms in the order the run named them."""
    named = [a for a in summary.get("settings", {}).get("algos", []) if a in summary["algos"]]
    return named + [a for a in summary["algos"] if a not in named]


def _run_line(summary: dict, short: bool = False) -> str:
    """The command, its design and what it took; `short`: without the model, task, algorithms and learning rate
    (README's prose, table and command say them)."""
    s = summary.get("settings", {})
    algos = _order(summary)
    seeds = s.get("seeds", summary["algos"][algos[0]]["seeds"])
    steps = s.get("steps", summary["algos"][algos[0]]["steps"])
    design = [f"{len(seeds)} seed{'s' if len(seeds) > 1 else ''} x {steps} steps"]  # seeds 0..N-1 (`command`)
    if "batch_size" in s and "group_size" in s:
        design[0] += f" x {s['batch_size']} prompts x G={s['group_size']}"
    if "lr" in s and not short:
        design.append(f"lr {s['lr']:g}")
    if "parallel" in s:
        design.append(f"{s['parallel']} run{'s' if s['parallel'] > 1 else ''} at once")
    model = f"a tiny Llama of {s['parameters']:,} parameters" if "parameters" in s else "a tiny Llama"
    took = ""
    if summary.get("seconds") is not None:
        took = f": {summary['seconds'] / 60:.0f} min"
        peak = summary.get("timings", {}).get("peak_pss_gib")
        if peak is not None:
            took += f", {peak:.1f} GiB peak PSS"
    what = "" if short else (f"verl's real V1 trainer on CPU: {model} learns `n+1=`; "
                             f"{', '.join(NAMES.get(a, a) for a in algos)}; ")
    return f"`{command(s)}` ({what}{'; '.join(design)}){took}."


def _comparisons(summary: dict) -> list[dict]:
    """summary's comparisons EBPO - base, in the run's order of the baselines."""
    comps = summary.get("comparisons", {})
    return [comps[f"ebpo-{a}"] for a in _order(summary) if f"ebpo-{a}" in comps]


def _equal_budget_verdict(c: dict) -> str:
    """A comparison's verdict at an equal answer budget: its final-reward verdict where the two are the same
    numbers (both runs generated the same answers), else its equal-budget verdict."""
    same = (c.get("equal_budget_diff"), c.get("equal_budget_ci95")) == (c.get("diff"), c.get("ci95"))
    return c["verdict"] if same or "equal_budget_verdict" not in c else c["equal_budget_verdict"]


def readme_block(summary: dict) -> str:
    """README's block: the command and design, one row per algorithm, one verdict per EBPO comparison (at an
    equal answer budget, `_equal_budget_verdict`). Not the shares of answers with advantage 0: EBPO's all-wrong
    groups get a non-zero advantage whose expected gradient is zero, so its low share there is not more signal
    (docs/demo.md's table has the column, beside that explanation)."""
    tail, budget = summary["tail_steps"], summary["equal_budget_answers"]
    lines = [_run_line(summary, short=True), "",
             f"| | final reward (last {tail} steps) | at equal budget ({budget:,.0f} answers) | greedy accuracy | "
             "answers generated |", "|---|---|---|---|---|"]
    for algo in _order(summary):
        a = summary["algos"][algo]
        lines.append(f"| {NAMES.get(algo, algo)} | {_f(a['final_reward_mean'])}{_ci(a['final_reward_ci95'])} | "
                     f"{_f(a['final_reward_at_equal_budget_mean'])}{_ci(a['final_reward_at_equal_budget_ci95'])} | "
                     f"{_f(a['greedy_accuracy_mean'], 2)} | {a['answers_generated']:,} |")
    lines += _verdict_lines([_equal_budget_verdict(c) for c in _comparisons(summary)])
    return "\n".join(lines)


def _verdict_lines(verdicts: list[str]) -> list[str]:
    """The verdicts as a list (each "not resolved" with its resolvable difference only), and the 80%-power
    explanation once after them (`compare.wording`)."""
    from verl_ebpo.tools.compare import wording

    if not verdicts:
        return []
    note = wording.power_note(verdicts)
    return ["", *[f"- {wording.short(v)}" for v in verdicts], *(["", note] if note else [])]


def doc_block(summary: dict) -> str:
    """docs/demo.md's block: the command and design, the table with every interval, every verdict."""
    tail, budget = summary["tail_steps"], summary["equal_budget_answers"]
    lines = [_run_line(summary), "",
             f"| algorithm | final reward (last {tail} steps) | at equal budget ({budget:,.0f} answers) | "
             "greedy accuracy (before -> after) | answers generated | advantage exactly 0 or dropped, first / last "
             "steps |",
             "|---|---|---|---|---|---|"]
    for algo in _order(summary):
        a = summary["algos"][algo]
        lines.append(
            f"| {NAMES.get(algo, algo)} | {_f(a['final_reward_mean'])}{_ci(a['final_reward_ci95'])} | "
            f"{_f(a['final_reward_at_equal_budget_mean'])}{_ci(a['final_reward_at_equal_budget_ci95'])} | "
            f"{_f(a.get('greedy_accuracy_before_mean'), 2)} -> {_f(a['greedy_accuracy_mean'], 2)}"
            f"{_ci(a.get('greedy_accuracy_ci95', [None, None]), 2)} | {a['answers_generated']:,} | "
            f"{_pct(a.get('no_signal_share_first_steps'))} / {_pct(a.get('no_signal_share_last_steps'))} |")
    lines += _verdict_lines([c[k] for c in _comparisons(summary)
                             for k in ("verdict", "equal_budget_verdict", "greedy_accuracy_verdict") if k in c])
    return "\n".join(lines)


def doc_blocks(summary: dict) -> dict:
    """KEY -> body of the demo's blocks."""
    return {"readme": readme_block(summary), "doc": doc_block(summary)}
