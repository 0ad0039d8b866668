"""`verl-ebpo`: EBPO for verl. Train with it on CPU, compare runs over seeds, check a run before it starts.

Each subcommand lives in its own module, imported only when used; each target named in `SUBCOMMANDS` (a module,
or `module:object`) exposes `add_arguments(parser)` and `run(args) -> int`. A subcommand whose modules are missing
(the GPU install, `pip install -e .`, has no extras) stops before it parses or does anything, with one line naming
the `pip install` that fixes it (exit 2). Every help page ends with an example (`EXAMPLES`), and defaults are
written one way, `(default: X)`, whatever the module wrote (`uniform_defaults`). Every command exits as `EXIT_CODES`
says (`main` holds it to that).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import re
import sys

DESCRIPTION = ("EBPO (Empirical Bayes Policy Optimization) for verl: add `algorithm.adv_estimator=ebpo` to a verl "
               "run; these commands try it on CPU, compare runs over seeds and check a run before it starts.")

SUBCOMMANDS = {
    # name: (module, what the command is for, in one line)
    "demo": ("verl_ebpo.tools.demo", "try EBPO against GRPO and DAPO on this CPU with verl's real trainer, over seeds"),
    "compare": ("verl_ebpo.tools.compare", "compare your verl runs (and evaluations) over seeds: table, verdicts, figures"),
    "preflight": ("verl_ebpo.tools.preflight", "check a verl command before it starts: data, disk, GPU memory, reward"),
    "inspect": ("verl_ebpo.tools.inspect_prior", "show the EBPO prior saved in a checkpoint (mu, variances, shrinkage)"),
    "simulate": ("verl_ebpo.tools.simulate", "see when EBPO helps, in a seeded simulator of RL with verifiable rewards"),
    "label-topics": ("verl_ebpo.tools.labeling.cli:TOPICS", "label each prompt of a verl parquet file with a topic "
                     "(for EBPO-topic's data order)"),
    "label-difficulty": ("verl_ebpo.tools.labeling.cli:DIFFICULTY", "label each prompt of a verl parquet file with "
                         "its pass rate (for EBPO-diff's curriculum)"),
}

# one example per command, shown at the end of its --help
EXAMPLES = {
    "demo": "verl-ebpo demo --quick                 # one seed each, about 10 min on 2 cores of its own",
    "compare": "verl-ebpo compare --runs runs/demo/runs --batch-size 16 --group-size 4 --out report/",
    "preflight": "verl-ebpo preflight --gpu-memory-gb 80 algorithm.adv_estimator=ebpo data.train_files=train.parquet ...",
    "inspect": "verl-ebpo inspect runs/demo/runs/ebpo/seed0/checkpoints   # the demo keeps this one",
    "simulate": "verl-ebpo simulate --G 2 8 --seeds 3 --out runs/simulate_small",
    "label-topics": "verl-ebpo label-topics --from-field data_source train.parquet train_topics.parquet",
    "label-difficulty": "verl-ebpo label-difficulty train.parquet rollouts.jsonl train_diff.parquet --workers 4",
}

EXIT_CODES = "exit status, every command: 0 done; 2 refused or failed, with one line on stderr saying why; 130 interrupted."

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


_DEFAULT_FORMS = (
    (re.compile(r"\(default (?!:)"), "(default: "),  # "(default 9)" -> "(default: 9)"
    (re.compile(r"\s*\[([^\[\]]+)\]$"), r" (default: \1)"),  # a trailing "[80]" -> "(default: 80)"
)


def uniform_defaults(parser: argparse.ArgumentParser) -> None:
    """Every option's default written one way, `(default: X)`, whichever way its module wrote it."""
    for action in parser._actions:
        if action.help and action.help is not argparse.SUPPRESS:
            for pattern, repl in _DEFAULT_FORMS:
                action.help = pattern.sub(repl, action.help)


def version_line() -> str:
    """This package's version, verl's and vLLM's, and which of the package's extras are installed (an extra is
    installed when every distribution it requires is)."""
    from importlib.metadata import PackageNotFoundError, requires

    from packaging.requirements import Requirement

    from verl_ebpo import __version__
    from verl_ebpo.tools.provenance import version

    try:
        declared = requires("verl-ebpo") or []
    except PackageNotFoundError:  # run from a source tree that was not pip-installed
        declared = []
    extras: dict[str, list[str]] = {}
    for req in map(Requirement, declared):
        for extra in re.findall(r'extra == "([^"]+)"', str(req.marker or "")):
            extras.setdefault(extra, []).append(req.name)
    have = [extra for extra, names in extras.items() if all(version(name) for name in names)]
    lacking = "; not installed: " + ", ".join(e for e in extras if e not in have) if len(have) < len(extras) else ""
    return (f"verl-ebpo {__version__} (verl {version('verl') or 'not installed'}, vllm "
            f"{version('vllm') or 'not installed'}; extras installed: {', '.join(have) or 'none'}{lacking})")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; only `command`'s module is imported (so one subcommand never breaks another)."""
    import textwrap

    parser = argparse.ArgumentParser(
        prog="verl-ebpo", description=textwrap.fill(DESCRIPTION, 100),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"example:\n  {EXAMPLES['demo']}\n\n`verl-ebpo COMMAND --help`: a command's options and an "
               f"example.\n\n{textwrap.fill(EXIT_CODES, 100)}")
    parser.add_argument("--version", action="version", version=version_line(),
                        help="print the versions of this package, verl and vLLM, and the extras installed")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=textwrap.fill(help_text, 100),
                           epilog=f"example:\n  {EXAMPLES[name]}",
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        if name != command:
            continue
        module_name, _, attr = module.partition(":")
        target = importlib.import_module(module_name)
        target = getattr(target, attr) if attr else target
        target.add_arguments(p)
        uniform_defaults(p)
        p.set_defaults(run_command=target.run)
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
    code = int(args.run_command(args) or 0)
    return code if code in (0, 2, 130) else 2  # EXIT_CODES


if __name__ == "__main__":
    sys.exit(main())
