"""Rewrite the docs' generated result blocks from the committed results files.

    python -m verl_ebpo.tools.results_docs [--root .]

(`python -m verl_ebpo.tools.simulate.docs` is the same command.) For each `<!-- results:NAME:KEY -->` ...
`<!-- /results -->` block in README.md and docs/*.md, the body becomes block KEY of `blocks(summary)`, the
rendering of docs/results/NAME/summary.json by the tool that wrote it:

- `verl-ebpo simulate`: `simulate.docs.doc_blocks` and `readme` (`simulate.docs.readme_block`);
- `verl-ebpo simulate --study topics` (`"study": "topics"`): `simulate.topics.doc_blocks`;
- `verl-ebpo demo` (a summary with `tail_steps`): `demo.docs.doc_blocks`.

The blocks are the only place the docs quote these numbers (tests/test_docs_numbers.py checks them).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys

from verl_ebpo.files import atomic_write_text

# a block's start; its KEY
START = r"<!-- results:([\w-]+):([\w-]+) -->"


def kind(summary: dict) -> str:
    """Which tool wrote `summary`: "topics", "demo" or "simulate"."""
    if summary.get("study") == "topics":
        return "topics"
    if "tail_steps" in summary and "algos" in summary:
        return "demo"
    return "simulate"


def blocks(summary: dict) -> dict:
    """KEY -> body of every block a results file renders."""
    k = kind(summary)
    if k == "topics":
        from verl_ebpo.tools.simulate.topics import doc_blocks

        return doc_blocks(summary)
    if k == "demo":
        from verl_ebpo.tools.demo.docs import doc_blocks

        return doc_blocks(summary)
    from verl_ebpo.tools.simulate import docs

    return {**docs.doc_blocks(summary), "readme": docs.readme_block(summary)}


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
    with open(os.path.join(root, "docs", "results", name, "summary.json"), encoding="utf-8") as f:
        return json.load(f)


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
            except (KeyError, TypeError, IndexError) as e:
                raise ValueError(f"docs/results/{name}/summary.json: missing or malformed field ({e!r})") from e
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
