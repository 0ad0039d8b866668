"""`verl-ebpo simulate`: a seeded RLVR simulator -- each estimator's learning-rate envelope, verl's own advantages.

A policy learns many prompts of varied difficulty from binary rewards (`task`: the model and its gradient). Every
advantage comes from verl's own registered estimator function (`estimators`: `get_adv_estimator_fn`, `ebpo`
through this package's plug-in), called as verl's trainer calls it; seeds and learning rates run as a batch
dimension (`engine`). The study (`lr`): every estimator at every lr of a fixed grid, each one's best lr chosen on
tuning seeds, EBPO against each baseline at each one's own best lr, and each estimator's gradient noise at the
initial policy (`gradient`). User documentation: docs/simulator.md.
"""

from __future__ import annotations

import argparse
import dataclasses

HELP = ("simulate RLVR learning: every estimator's learning-rate envelope, EBPO against GRPO, Dr.GRPO, RLOO and "
        "REINFORCE++-baseline at each one's own best lr, over seeds and G")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per `SimOptions` field (`--answers-per-step` for `answers_per_step`), documented by the field;
    list-valued fields take several values. Plus the output flags."""
    from verl_ebpo.tools.simulate.options import SimOptions, words

    for f in dataclasses.fields(SimOptions):
        kwargs = {"nargs": "+"} if isinstance(f.default, tuple) else {}
        parser.add_argument("--" + f.name.replace("_", "-"), dest=f.name, default=None, metavar=f.name.upper(),
                            help=f"{f.metadata['help']} (default {' '.join(words(f.default))})", **kwargs)
    parser.add_argument("--out", default="runs/simulate", help="output folder (default runs/simulate)")
    parser.add_argument("--no-figure", action="store_true", help="skip the figure")
    parser.add_argument("--quiet", action="store_true", help="no progress bar and no tables, only the closing line")


def run(args: argparse.Namespace) -> int:
    from verl_ebpo.tools.simulate.lr import main
    from verl_ebpo.tools.simulate.options import SimOptions

    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(SimOptions)
             if getattr(args, f.name, None) is not None}
    given = {k: " ".join(v) if isinstance(v, list) else v for k, v in given.items()}
    return main(given, args.out, figure_too=not args.no_figure, quiet=args.quiet)
