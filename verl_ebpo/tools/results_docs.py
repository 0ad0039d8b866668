"""The one renderer from results files to the docs: every published number comes from a committed results file.

    python -m verl_ebpo.tools.results_docs [--root .]

For each `<!-- results:NAME:KEY -->` ... `<!-- /results -->` block in README.md and docs/*.md, the body becomes
block KEY of `blocks(docs/results/NAME/summary.json)`:

- `verl-ebpo simulate` (`"study": "lr"`): `simulate.lr.doc_blocks`;
- the demo over learning rates (`"study": "demo_lr"`): `readme` (`simulate.lr.demo_line`);
- `verl-ebpo demo`: `readme` and `doc`.

tests/test_docs_numbers.py checks that the blocks equal their rendering. A results file that is not JSON, or lacks
a field its renderer reads, is one line on stderr naming the file, and exit status 2.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys

from verl_ebpo.tools.files import atomic_write_text

START = r"<!-- results:([\w-]+):([\w-]+) -->"


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

def blocks(summary: dict) -> dict:
    """KEY -> body of every block a results file renders."""
    from verl_ebpo.tools.simulate import lr

    if summary.get("study") == "lr":
        return lr.doc_blocks(summary)
    if summary.get("study") == "demo_lr":
        return {"readme": lr.demo_line(summary)}
    return {"readme": _demo_block(summary, False), "doc": _demo_block(summary, True)}


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
