"""`verl-ebpo` console script. Each subcommand lives in its own module, imported only when used.

Each target named below (a module, or `module:object`) exposes `add_arguments(parser)` and `run(args) -> int`.
"""

from __future__ import annotations

import argparse
import importlib
import sys

SUBCOMMANDS = {
    # name: (module, one-line help)
    "demo": ("verl_ebpo.tools.demo", "EBPO vs GRPO / DAPO (/ Dr.GRPO) on CPU with verl's real trainer, over seeds"),
    "inspect": ("verl_ebpo.tools.inspect_prior", "print the EBPO prior saved in a verl checkpoint folder"),
    "label-topics": ("verl_ebpo.tools.labeling.cli:TOPICS", "add a topic label to a verl RL parquet file"),
    "label-difficulty": ("verl_ebpo.tools.labeling.cli:DIFFICULTY", "add a pass-rate difficulty to a verl RL parquet file"),
    "simulate": ("verl_ebpo.tools.simulate", "seeded RLVR simulator: EBPO vs GRPO, DAPO, ... over seeds and G"),
}


def one_line(text) -> str:
    """`text` (or an exception) as one line: every run of whitespace, line breaks included, becomes one space.
    The commands and the recipes' tools print their errors through it (one line on stderr, no traceback)."""
    return " ".join(str(text).split())


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; only `command`'s module is imported (so one subcommand never breaks another)."""
    parser = argparse.ArgumentParser(prog="verl-ebpo", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name != command:
            continue
        module_name, _, attr = module.partition(":")
        target = importlib.import_module(module_name)
        target = getattr(target, attr) if attr else target
        target.add_arguments(p)
        p.set_defaults(_run=target.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    args = build_parser(command if command in SUBCOMMANDS else None).parse_args(argv)
    return int(args._run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
