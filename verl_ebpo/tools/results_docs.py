"""The one renderer from results files to the docs: every published number comes from a committed results file.

    python -m verl_ebpo.tools.results_docs [--root .]

For each `<!-- results:NAME:KEY -->` ... `<!-- /results -->` block in README.md and docs/*.md, the body becomes
block KEY of `blocks(docs/results/NAME/summary.json)`:

- a `verl-ebpo simulate` sweep: `run`, `headline`, `gradient`, `cells`, `readme`, `readme_against`;
- `verl-ebpo simulate --study topics` (`"study": "topics"`): `simulate.topics.doc_blocks`;
- `verl-ebpo demo` (a summary with `tail_steps`): `readme` and `doc`.

tests/test_docs_numbers.py checks that the blocks equal their rendering. A results file that is not JSON, or lacks
a field its renderer reads, is one line on stderr naming the file, and exit status 2.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import re
import sys

import numpy as np

from verl_ebpo.tools.files import atomic_write_text

START = r"<!-- results:([\w-]+):([\w-]+) -->"


# ---- `verl-ebpo simulate` ----

NEAREST = ("drgrpo", "grpo", "rloo")  # the group-mean baselines EBPO shrinks


def _sim_run(summary: dict) -> str:
    from verl_ebpo.tools.simulate.report import lr_edges, lr_extended, share

    cells = [c for per in summary["regimes"].values() for per_g in per.values() for c in per_g.values()]
    firsts = [c["first_step_gain_frac"] for c in cells if c.get("first_step_gain_frac") is not None]
    halves = [c["steps_to_half_gain"] for c in cells]
    edges, extended = lr_edges(summary), lr_extended(summary)
    return (f"`{summary.get('command', 'verl-ebpo simulate')}`: {len(summary['regimes'])} regimes x "
            f"{len(next(iter(summary['regimes'].values())))} estimators x G in {summary['G']}, lr grid "
            f"{summary['lr_grid']}, {summary['seeds']} reporting + {len(summary['tune_seeds'])} tuning seeds, "
            f"{summary['budget_answers']:,} answers per run, {summary['seconds']:.0f} s. At each cell's chosen lr "
            f"the first step makes {share(min(firsts))} to {share(max(firsts))} of the run's final gain and half the "
            f"gain takes {min(halves):g} to {max(halves):g} steps; "
            + (f"chosen lr at an edge of its grid: {', '.join(edges)}." if edges else
               "every chosen lr lies strictly inside its grid.")
            + (f" Grids extended past an edge (`regimes.run_cell`): {'; '.join(extended)}." if extended else
               " No grid needed extending."))


def _directions(classes: dict) -> str:
    """'2 lower (1 possibly negligible), 0 higher': resolved verdicts by direction."""
    out = []
    for word in ("lower", "higher"):
        strict, maybe = classes.get(word, 0), classes.get(f"{word} (possibly negligible)", 0)
        out.append(f"{strict + maybe} {word}" + (f" ({maybe} possibly negligible)" if maybe else ""))
    return ", ".join(out)


def _family(summary: dict, kind: str, pairs) -> str:
    from verl_ebpo.tools.simulate.report import family_of
    from verl_ebpo.tools.stats import family_counts

    c = family_counts(family_of(summary, kind, set(pairs)), summary["negligible"])
    return f"{_directions(c['classes'])} of {c['n']} ({c['holm_resolved']} after Holm)"


def _sim_readme(summary: dict) -> str:
    """EBPO's gradient noise over Dr.GRPO's and James-Stein's (range over regimes) at the smallest G and the
    others, and the AUC verdicts of those pairs."""
    from verl_ebpo.tools.simulate.report import PAIRS

    Gs = [str(g) for g in summary["G"]]
    names = {"ebpo-drgrpo": "Dr.GRPO's", "ebpo-js": "James-Stein's"}
    parts = []
    for p in PAIRS:
        per = [(G, c["noise_ratio"]) for comps in summary["regime_comparisons"].values()
               for G, c in comps.get(p, {}).items() if c.get("noise_ratio") is not None]
        small, rest = [r for G, r in per if G == Gs[0]], [r for G, r in per if G != Gs[0]]
        if small:
            parts.append(f"over {names.get(p, p)} {min(small):.2f}-{max(small):.2f} at G={Gs[0]}"
                         + (f", {min(rest):.2f}-{max(rest):.2f} at G={'/'.join(Gs[1:])}" if rest else ""))
    return f"EBPO's gradient noise {'; '.join(parts)}. AUC vs these two: {_family(summary, 'AUC', PAIRS)}."


def _sim_against(summary: dict) -> str:
    """The counts that go against EBPO, the design's power, and EBPO against DAPO at an equal answer budget."""
    from verl_ebpo.tools.simulate.report import PAIRS, comparison_intervals
    from verl_ebpo.tools.stats import classify

    present = next(iter(summary["regime_comparisons"].values()))
    pairs = [p for p in PAIRS if p in present]
    parts = [f"final success vs Dr.GRPO/JS {_family(summary, 'final success', pairs)}"]
    if "ebpo-rfpp_baseline" in present:
        parts.append(f"AUC vs verl's REINFORCE++-baseline {_family(summary, 'AUC', ['ebpo-rfpp_baseline'])}")
    near = sorted({f"ebpo-{b}" for b in NEAREST} & set(present))
    cells = [c for comps in summary["regime_comparisons"].values() for key in near for c in comps.get(key, {}).values()]
    better = sum(any(classify(iv, summary["negligible"]).startswith("higher")
                     for kind, iv in comparison_intervals(c, summary["seeds"]).items() if kind != "gradient noise")
                 for c in cells)
    parts.append(f"above Dr.GRPO, GRPO or RLOO in {better} of {len(cells)}")
    det = {}
    for name, comps in summary["regime_comparisons"].items():
        d = [comparison_intervals(c, summary["seeds"])["AUC"].detectable() for key in pairs + near
             for c in comps.get(key, {}).values()]
        det[name] = float(np.median([x for x in d if math.isfinite(x)]))
    text = ("Against EBPO: " + "; ".join(parts) + ". Median 80%-power AUC resolution: "
            + ", ".join(f"±{v:.2g} {k}" for k, v in det.items()) + ".")
    r = [per["ebpo"][str(G)]["grad_noise_budget"] / per["dapo"][str(G)]["grad_noise_budget"]
         for per in summary["regimes"].values() if "dapo" in per for G in summary["G"]
         if per["ebpo"][str(G)].get("grad_noise_budget") and per["dapo"][str(G)].get("grad_noise_budget")]
    if r:
        text += (f" At an equal answer budget EBPO's noise is {min(r):.2f}-{max(r):.2f}x DAPO's "
                 f"({sum(x < 1 for x in r)} of {len(r)} cells below 1).")
    return text


def simulate_blocks(summary: dict) -> dict:
    from verl_ebpo.tools.simulate.report import cells_table, family_table, gradient_table

    return {"run": _sim_run(summary), "headline": family_table(summary), "gradient": gradient_table(summary),
            "cells": cells_table(summary), "readme": _sim_readme(summary), "readme_against": _sim_against(summary)}


# ---- `verl-ebpo demo` ----

DEMO_FLAGS = ("algos", "steps", "batch_size", "group_size", "lr", "max_response_length", "temperature", "parallel")


def demo_command(settings: dict) -> str:
    """The `verl-ebpo demo` command line that makes a run of `settings` (flags only where not the default)."""
    from verl_ebpo.tools.demo.options import DemoOptions

    default = DemoOptions()
    argv = ["verl-ebpo", "demo"]
    seeds = list(settings.get("seeds", default.seed_list))
    if settings.get("quick"):
        argv.append("--quick")
    elif seeds != default.seed_list:
        argv += ["--seeds", str(len(seeds))]  # the demo runs seeds 0..N-1
    for key in DEMO_FLAGS:
        value = tuple(settings[key]) if key == "algos" and key in settings else settings.get(key)
        if value is not None and value != getattr(default, key):
            argv += ["--" + key.replace("_", "-"), ",".join(value) if key == "algos" else f"{value:g}"]
    return " ".join(argv)


def _f(x, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _ci(pair, digits: int = 3) -> str:
    return "" if None in pair else f" [{pair[0]:.{digits}f}, {pair[1]:.{digits}f}]"


def _demo_block(summary: dict, full: bool) -> str:
    """The command and design, one row per algorithm, and the verdicts of EBPO against each baseline: README's
    (`full=False`) at an equal answer budget only; docs/demo.md's every verdict, the greedy accuracy before
    training and the share of answers with advantage exactly 0 (or dropped)."""
    from verl_ebpo.tools.compare.plots import NAMES

    s, tail, budget = summary["settings"], summary["tail_steps"], summary["equal_budget_answers"]
    algos = [a for a in s["algos"] if a in summary["algos"]]
    design = f"{len(s['seeds'])} seeds x {s['steps']} steps x {s['batch_size']} prompts x G={s['group_size']}"
    what = (f"verl's real V1 trainer on CPU: a tiny Llama of {s['parameters']:,} parameters learns `n+1=`; "
            f"{', '.join(NAMES.get(a, a) for a in algos)}; {design}; lr {s['lr']:g}") if full else design
    took = f": {summary['seconds'] / 60:.0f} min" if summary.get("seconds") is not None else ""
    if "peak_pss_gib" in summary.get("timings", {}):
        took += f", {summary['timings']['peak_pss_gib']:.1f} GiB peak PSS"
    parallel = f"; {s['parallel']} runs at once" if s.get("parallel", 1) > 1 else ""
    greedy = "greedy accuracy (before -> after)" if full else "greedy accuracy"
    extra = " advantage exactly 0 or dropped, first / last steps |" if full else ""
    lines = [f"`{demo_command(s)}` ({what}{parallel}){took}.", "",
             f"|{' algorithm' if full else ''} | final reward (last {tail} steps) | at equal budget ({budget:,.0f} "
             f"answers) | {greedy} | answers generated |{extra}", "|---|---|---|---|---|" + ("---|" if full else "")]
    for algo in algos:
        a = summary["algos"][algo]
        row = (f"| {NAMES.get(algo, algo)} | {_f(a['final_reward_mean'])}{_ci(a['final_reward_ci95'])} | "
               f"{_f(a['final_reward_at_equal_budget_mean'])}{_ci(a['final_reward_at_equal_budget_ci95'])} | ")
        if full:
            pct = ["n/a" if a.get(k) is None else f"{100 * a[k]:.0f}%"
                   for k in ("no_signal_share_first_steps", "no_signal_share_last_steps")]
            row += (f"{_f(a.get('greedy_accuracy_before_mean'), 2)} -> {_f(a['greedy_accuracy_mean'], 2)}"
                    f"{_ci(a.get('greedy_accuracy_ci95', [None, None]), 2)} | {a['answers_generated']:,} | "
                    f"{pct[0]} / {pct[1]} |")
        else:
            row += f"{_f(a['greedy_accuracy_mean'], 2)} | {a['answers_generated']:,} |"
        lines.append(row)
    comps = [summary["comparisons"][f"ebpo-{a}"] for a in algos if f"ebpo-{a}" in summary.get("comparisons", {})]
    keys = ("verdict", "equal_budget_verdict", "greedy_accuracy_verdict") if full else ("equal_budget_verdict",)
    verdicts = [c[k] for c in comps for k in keys if k in c]
    return "\n".join(lines + ([""] + [f"- {v}" for v in verdicts] if verdicts else []))


# ---- the renderer ----

def kind(summary: dict) -> str:
    """Which tool wrote `summary`: "topics", "lr", "demo_lr", "demo" or "simulate"."""
    if summary.get("study") in ("topics", "lr", "demo_lr"):
        return summary["study"]
    return "demo" if "tail_steps" in summary and "algos" in summary else "simulate"


def blocks(summary: dict) -> dict:
    """KEY -> body of every block a results file renders."""
    k = kind(summary)
    if k == "demo_lr":
        from verl_ebpo.tools.simulate.lr import demo_markdown

        return {"results": demo_markdown(summary)}
    if k == "lr":
        from verl_ebpo.tools.simulate.lr import doc_blocks as lr_blocks

        return lr_blocks(summary)
    if k == "topics":
        from verl_ebpo.tools.simulate.topics import doc_blocks

        return doc_blocks(summary)
    if k == "demo":
        return {"readme": _demo_block(summary, False), "doc": _demo_block(summary, True)}
    return simulate_blocks(summary)


def replace_blocks(text: str, rendered: dict, name: str) -> str:
    """`text` with each `<!-- results:NAME:KEY -->...<!-- /results -->` span's body replaced by rendered[KEY]."""

    def sub(m):
        if m.group(1) not in rendered:
            raise KeyError(f"no block {m.group(1)!r} for {name} (it renders {sorted(rendered)})")
        return f"<!-- results:{name}:{m.group(1)} -->\n{rendered[m.group(1)]}\n<!-- /results -->"

    body = r"(?:(?:(?!<!-- results:).)*?\n)?"  # a body never holds another block's start, and may be empty
    return re.sub(rf"<!-- results:{re.escape(name)}:([\w-]+) -->\n{body}<!-- /results -->", sub, text, flags=re.S)


def render(root: str, name: str) -> dict:
    """The blocks of docs/results/NAME/summary.json; ValueError naming the file when it cannot be rendered."""
    rel = f"docs/results/{name}/summary.json"
    try:
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            return blocks(json.load(f))
    except OSError as e:
        raise ValueError(f"{rel}: cannot be read ({e.strerror or e})") from None
    except ValueError as e:  # JSONDecodeError included
        raise ValueError(f"{rel}: not a results file ({e})") from None
    except (KeyError, TypeError, IndexError, AttributeError) as e:
        raise ValueError(f"{rel}: missing or malformed field ({type(e).__name__}: {e})") from None


def update(root: str) -> list[str]:
    """Rewrite the blocks of README.md and docs/*.md under `root`; returns the files that changed."""
    changed = []
    docs = sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "docs", "*.md")))
    for rel in [n for n in ["README.md", *docs] if os.path.isfile(os.path.join(root, n))]:
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            text = f.read()
        new = text
        for name in sorted({n for n, _ in re.findall(START, text)}):
            try:
                new = replace_blocks(new, render(root, name), name)
            except KeyError as e:
                raise ValueError(f"{rel}: {e.args[0]}") from None
        if new != text:
            atomic_write_text(os.path.join(root, rel), new)
            changed.append(rel)
    return changed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=".", help="the repository root (default .)")
    try:
        changed = update(ap.parse_args(argv).root)
    except ValueError as e:
        print(f"results_docs: error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    for rel in changed:
        print(f"rewrote {rel}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
