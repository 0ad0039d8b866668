"""`verl-ebpo` console script. Each subcommand lives in its own module, imported only when used.

Each target named below (a module, or `module:object`) exposes `add_arguments(parser)` and `run(args) -> int`.

A subcommand whose modules are missing (the GPU install, `pip install -e .`, has no extras) stops before it parses
or does anything, with one line naming the `pip install` that fixes it (exit 2).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

SUBCOMMANDS = {
    # name: (module, one-line help)
    "compare": ("verl_ebpo.tools.compare", "EBPO vs GRPO / DAPO over seeds from verl's metrics files and generations"),
    "demo": ("verl_ebpo.tools.demo", "EBPO vs GRPO / DAPO (/ Dr.GRPO) on CPU with verl's real trainer, over seeds"),
    "inspect": ("verl_ebpo.tools.inspect_prior", "print the EBPO prior saved in a verl checkpoint folder"),
    "label-topics": ("verl_ebpo.tools.labeling.cli:TOPICS", "add a topic label to a verl RL parquet file"),
    "label-difficulty": ("verl_ebpo.tools.labeling.cli:DIFFICULTY", "add a pass-rate difficulty to a verl RL parquet file"),
    "simulate": ("verl_ebpo.tools.simulate", "seeded RLVR simulator: EBPO vs GRPO, DAPO, ... over seeds and G"),
    "preflight": ("verl_ebpo.tools.preflight", "check a verl run before it starts: data, disk, GPU memory, nodes, reward"),
}

CPU_EXTRA = "pip install 'verl-ebpo[cpu]'"
# name: ((importable module, ...), the install that brings them). Optional needs are checked by the command
# itself (label-topics: scikit-learn and the embedding model only without --from-field, `topics` extra).
REQUIRES = {
    "demo": (("matplotlib", "transfer_queue"), CPU_EXTRA),  # plots; verl's V1 trainer (intervals need no scipy)
    "simulate": (("matplotlib",), CPU_EXTRA),  # the plot
}


def missing_requirement(command: str) -> str | None:
    """One line naming what `command` lacks in this environment and the install that fixes it; None if nothing."""
    modules, fix = REQUIRES.get(command, ((), ""))
    missing = [m for m in modules if _absent(m)]
    if not missing:
        return None
    return f"verl-ebpo {command}: needs {', '.join(missing)}, not installed here; fix: {fix}"


def _absent(module: str) -> bool:
    if sys.modules.get(module, False) is None:  # an import of it is known to fail (how tests fake a missing module)
        return True
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):
        return True


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
    asks_help = any(a in ("-h", "--help") for a in argv)
    problem = missing_requirement(command) if command in REQUIRES and not asks_help else None
    if problem:
        print(problem, file=sys.stderr)
        return 2
    args = build_parser(command if command in SUBCOMMANDS else None).parse_args(argv)
    return int(args._run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
