"""Rewrite the docs' generated result blocks from the committed results files.

    python -m verl_ebpo.tools.simulate.docs [--root .]

For each `<!-- results:NAME:KEY -->` ... `<!-- /results -->` block in docs/simulator.md and README.md, the body
becomes `report.doc_blocks` (README: `report.readme_block`) of docs/results/NAME/summary.json (a study's file,
`"study": "topics"`: `topics.doc_blocks`). The blocks are
the only place the docs quote the simulator's numbers (tests/test_docs_numbers.py checks them).
"""

from __future__ import annotations

import argparse
import json
import os
import re

from verl_ebpo.files import atomic_write_text
from verl_ebpo.tools.simulate import report

FILES = {"docs/simulator.md": report.doc_blocks, "README.md": lambda s: {"readme": report.readme_block(s)}}


def update(root: str) -> list[str]:
    """Rewrite the blocks under `root`; returns the files that changed."""
    changed = []
    for rel, render in FILES.items():
        path = os.path.join(root, rel)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        new = text
        for name in sorted(set(re.findall(r"<!-- results:([\w-]+):[\w-]+ -->", text))):
            with open(os.path.join(root, "docs", "results", name, "summary.json"), encoding="utf-8") as f:
                summary = json.load(f)
            if summary.get("study") == "topics":  # a study's blocks (docs/simulator.md only)
                from verl_ebpo.tools.simulate.topics import doc_blocks as render_study

                new = report.replace_blocks(new, render_study(summary), name)
            else:
                new = report.replace_blocks(new, render(summary), name)
        if new != text:
            atomic_write_text(path, new)
            changed.append(rel)
    return changed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=".", help="the repository root (default .)")
    args = ap.parse_args(argv)
    for rel in update(args.root):
        print(f"rewrote {rel}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
