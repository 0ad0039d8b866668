"""Rewrite the docs' generated result blocks from the committed results files.

    python -m verl_ebpo.tools.results_docs [--root .]

(`python -m verl_ebpo.tools.simulate.docs` is the same command.) For each `<!-- results:NAME:KEY -->` ...
`<!-- /results -->` block in README.md and docs/*.md, the body becomes block KEY of `blocks(summary)`, the
rendering of docs/results/NAME/summary.json by the tool that wrote it:

- `verl-ebpo simulate`: `simulate.docs.doc_blocks`, `readme` (`simulate.docs.readme_block`) and `readme_against`;
- `verl-ebpo simulate --study topics` (`"study": "topics"`): `simulate.topics.doc_blocks`;
- `verl-ebpo demo` (a summary with `tail_steps`): `demo.docs.doc_blocks`;
- a set of simulate sweeps that differ in their drift penalty (`"study": "drift"`, its `sources` the results
  names): `simulate.docs.drift_blocks`.

The blocks are the only place the docs quote these numbers (tests/test_docs_numbers.py checks them).

Every results file is checked against the schema of what its renderer reads (`SCHEMAS`, one per kind) before it
is rendered: a file that is not JSON, not an object, or holds a field of the wrong type is one line on stderr
naming the file, the field, what it holds and what is expected, and exit status 2.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys

from verl_ebpo.tools.files import atomic_write_text

# a block's start; its KEY
START = r"<!-- results:([\w-]+):([\w-]+) -->"


# ---- the schema each kind's renderer reads ----
# A schema is a type name ("num": a number; "num?": a number or null; "int", "str", "bool", "any"), a list of one
# schema (every item), or a dict of key -> schema ("*": every key; a key ending in "?" may be absent).
_CI = ["num?"]
_SIM_CELL = {"final_mean": "num", "ci95": _CI, "auc_mean": "num", "lr": "num", "steps_to_half_gain": "num",
             "first_step_gain_frac?": "num?", "grad_noise?": "num?", "grad_cos_draw?": "num?",
             "degenerate_discard_frac?": "num?", "surplus_discard_frac?": "num?"}
_SIM_COMP = {"diff": "num", "ci95": _CI, "auc_diff": "num", "auc_ci95": _CI, "noise_ratio?": "num?",
             "noise_ratio_ci95?": _CI}
_TOPIC_RATIO = {"ratio": "num", "ci95": _CI, "class": "str"}
SCHEMAS = {
    "simulate": {"seeds": "int", "G": ["int"], "negligible": "num", "lr_grid": ["num"], "tune_seeds": ["int"],
                 "budget_answers": "num", "seconds": "num", "command?": "str",
                 "regimes": {"*": {"*": {"*": _SIM_CELL}}}, "regime_comparisons": {"*": {"*": {"*": _SIM_COMP}}}},
    "topics": {"command": "str", "seconds": "num", "G": ["int"], "seeds": "int", "draws": "int", "warmup": "int",
               "estimators": ["str"], "decay": "num", "worth_threshold": "num", "per_topic_large_at_G": ["int"],
               "model": {"topics": "int", "concentration": "num", "beta": ["num"], "score_noise": "num",
                         "prompts": "int", "answers_per_step": "int"},
               "cells": {"*": {"*": {"*": {"grad_noise": "num", "grad_noise_ci95": _CI}}}},
               "comparisons": {"*": {"*": {"*": {"noise": _TOPIC_RATIO, "prior_err?": _TOPIC_RATIO}}}}},
    "drift": {"study": "str", "sources": ["str"]},
    "lr": {"study": "str", "seeds": "int", "at_best_lr": [{"diff": "num", "ci95": _CI, "verdict": "str"}],
           "envelope": {"*": {"*": {"*": {"*": {"auc_mean": "num", "auc_ci95": _CI, "final_mean": "num"}}}}}},
    "demo_lr": {"study": "str", "lrs": {"*": {"seeds": "int", "steps": "int"}}},
    "demo": {"tail_steps": "int", "equal_budget_answers": "num", "seconds?": "num?",
             "algos": {"*": {"final_reward_mean": "num", "final_reward_ci95": _CI,
                             "final_reward_at_equal_budget_mean?": "num?", "final_reward_at_equal_budget_ci95?": _CI,
                             "greedy_accuracy_mean?": "num?", "answers_generated?": "num"}},
             "comparisons?": {"*": {"diff?": "num", "ci95?": _CI, "verdict?": "str"}}},
}


def _type_ok(value, t: str) -> bool:
    if t == "any":
        return True
    if t.endswith("?") and value is None:
        return True
    t = t.rstrip("?")
    if t == "num":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if t == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, {"str": str, "bool": bool}[t])


def _holds(value) -> str:
    text = json.dumps(value)
    return f"{text[:40]}{'...' if len(text) > 40 else ''} ({type(value).__name__ if value is not None else 'null'})"


def check(value, schema, where: str = "") -> None:
    """Raise ValueError naming the first field of `value` that does not match `schema` (see SCHEMAS)."""
    at = where or "the top level"
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            raise ValueError(f"{at} holds {_holds(value)}; expected a JSON object")
        for key, sub in schema.items():
            if key == "*":
                for k, v in value.items():
                    check(v, sub, f"{where}.{k}" if where else k)
                continue
            name, optional = key.rstrip("?"), key.endswith("?")
            if name not in value:
                if optional:
                    continue
                raise ValueError(f"{at} has no field {name!r}")
            check(value[name], sub, f"{where}.{name}" if where else name)
    elif isinstance(schema, list):
        if not isinstance(value, list):
            raise ValueError(f"{at} holds {_holds(value)}; expected a list")
        for i, v in enumerate(value):
            check(v, schema[0], f"{where}[{i}]")
    elif not _type_ok(value, schema):
        want = {"num": "a number", "num?": "a number or null", "int": "a whole number", "str": "a string",
                "bool": "true or false"}.get(schema, schema)
        raise ValueError(f"{at} holds {_holds(value)}; expected {want}")


def kind(summary: dict) -> str:
    """Which tool wrote `summary`: "topics", "drift", "demo" or "simulate"."""
    if summary.get("study") == "drift":
        return "drift"
    if summary.get("study") in ("topics", "lr", "demo_lr"):
        return summary["study"]
    if "tail_steps" in summary and "algos" in summary:
        return "demo"
    return "simulate"


def blocks(summary: dict) -> dict:
    """KEY -> body of every block a results file renders."""
    k = kind(summary)
    if k == "drift":
        from verl_ebpo.tools.simulate.docs import drift_blocks

        return drift_blocks(summary["_sources"])
    if k == "lr":
        from verl_ebpo.tools.simulate.lr import doc_blocks as lr_blocks

        return lr_blocks(summary)
    if k == "topics":
        from verl_ebpo.tools.simulate.topics import doc_blocks

        return doc_blocks(summary)
    if k == "demo":
        from verl_ebpo.tools.demo.docs import doc_blocks

        return doc_blocks(summary)
    from verl_ebpo.tools.simulate import docs

    return {**docs.doc_blocks(summary), "readme": docs.readme_block(summary),
            "readme_against": docs.readme_against(summary)}


def replace_blocks(text: str, rendered: dict, name: str) -> str:
    """`text` with each `<!-- results:NAME:KEY -->...<!-- /results -->` span's body replaced by rendered[KEY]."""

    def sub(m):
        key = m.group(1)
        if key not in rendered:
            raise KeyError(f"no block {key!r} for {name}")
        return f"<!-- results:{name}:{key} -->\n{rendered[key]}\n<!-- /results -->"

    # a body never contains another block's start, and may be empty
    body = r"(?:(?:(?!<!-- results:).)*?\n)?"
    return re.sub(rf"<!-- results:{re.escape(name)}:([\w-]+) -->\n{body}<!-- /results -->", sub, text, flags=re.S)


def doc_files(root: str) -> list[str]:
    """The files that may hold blocks, relative to `root`: README.md and docs/*.md."""
    names = ["README.md", *sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "docs", "*.md")))]
    return [n for n in names if os.path.isfile(os.path.join(root, n))]


def load(root: str, name: str) -> dict:
    """docs/results/NAME/summary.json, checked against its kind's schema: ValueError naming the file and what is
    wrong (not JSON, not an object, a field of the wrong type)."""
    rel = f"docs/results/{name}/summary.json"
    try:
        with open(os.path.join(root, "docs", "results", name, "summary.json"), encoding="utf-8") as f:
            summary = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{rel}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno}); re-run the tool "
                         "that wrote it") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{rel}: not UTF-8 text ({e.reason})") from None
    except OSError as e:
        raise ValueError(f"{rel}: cannot be read ({e.strerror or e})") from None
    if not isinstance(summary, dict):
        raise ValueError(f"{rel}: holds {_holds(summary)}; expected a JSON object (a results file)")
    try:
        check(summary, SCHEMAS[kind(summary)])
    except ValueError as e:
        raise ValueError(f"{rel} ({kind(summary)} results): {e}") from None
    if kind(summary) == "drift":
        sources = {}
        for src in summary["sources"]:
            sub = load(root, src)
            if kind(sub) != "simulate":
                raise ValueError(f"{rel}: source {src!r} holds {kind(sub)} results; expected a simulate sweep")
            sources[src] = sub
        summary["_sources"] = sources
    return summary


def update(root: str) -> list[str]:
    """Rewrite the blocks under `root`; returns the files that changed."""
    changed = []
    for rel in doc_files(root):
        path = os.path.join(root, rel)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        new = text
        for name in sorted({n for n, _ in re.findall(START, text)}):
            summary = load(root, name)
            try:
                rendered = blocks(summary)
            except (KeyError, TypeError, IndexError, AttributeError, ValueError) as e:  # past the schema's checks
                raise ValueError(f"docs/results/{name}/summary.json: missing or malformed field "
                                 f"({type(e).__name__}: {e})") from None
            try:
                new = replace_blocks(new, rendered, name)
            except KeyError as e:
                raise ValueError(f"{rel}: {e.args[0]} (docs/results/{name}/summary.json renders "
                                 f"{sorted(rendered)})") from e
        if new != text:
            atomic_write_text(path, new)
            changed.append(rel)
    return changed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=".", help="the repository root (default .)")
    args = ap.parse_args(argv)
    try:
        changed = update(args.root)
    except (OSError, ValueError, KeyError) as e:  # a missing results file, bad JSON, a block the file lacks
        print(f"results_docs: error: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        return 2
    for rel in changed:
        print(f"rewrote {rel}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
