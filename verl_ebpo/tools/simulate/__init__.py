"""`verl-ebpo simulate`: a seeded RLVR simulator -- EBPO vs verl's GRPO, Dr.GRPO, RLOO, DAPO in a minute.

A policy learns many prompts of varied difficulty from binary rewards. Every advantage comes from verl's own
registered estimator function (`get_adv_estimator_fn`, `ebpo` through this package's plug-in), called as
verl's trainer calls it; DAPO is GRPO plus dynamic sampling (degenerate groups resampled, every answer
generated counted). All estimators get the same answer budget; G is swept; seeds run as a batch dimension.
The default report is a family of regimes, each estimator at its own best learning rate (`regimes.py`).

The model (details and the derivation of the gradient in `verl_ebpo.tools.simulate.task`, user documentation in
docs/simulator.md):

- Prompt q (of P, per seed) has a base logit z0_q = logit(p0_q), p0_q ~ Beta(A, B) (with K topics:
  m_k ~ Beta(A, B) per topic, p0_q ~ Beta(c m_k, c (1 - m_k))), a topic t_q and a feature vector e_q ~ N(0, I_d/d).
- The policy's success logit is z_q = z0_q + sqrt(c_glob) w_glob + sqrt(c_topic) w_topic[t_q]
  + sqrt(c_feat) w_feat . e_q + sqrt(c_own) b_q; an answer succeeds with probability sigmoid(z_q).
  w_glob, w_topic, w_feat are shared by all prompts (learning one prompt moves the others through the
  kernel c_glob + c_topic [same topic] + c_feat e_q . e_q'); b_q is the prompt's own part. All start at 0.
- A step: B = answers_per_step / G prompts from the presentation stream, G answers each, advantages A_i
  from verl, then one Adam (or SGD) step on J = (1/N) sum_i A_i log pi(y_i | q_i) (REINFORCE, token-mean over
  one-token answers), whose gradient on z_q is (1/N) sum_{i in q} A_i (y_i - p_q), plus -- with
  `score_noise` sigma_n > 0 -- sigma_n sum_i A_i zeta_i / N, zeta_i ~ N(0, I): the part of an answer's
  log-probability gradient that has nothing to do with its success (its other tokens), which every
  non-zero advantage also pushes.
- Reported: expected success mean_q sigmoid(z_q) over the training prompts (and held-out prompts) when
  the budget is spent, exact, not sampled; the share of trained answers with |A| < 1e-6.
"""

from __future__ import annotations

import argparse
import sys

HELP = ("simulate RLVR learning: EBPO vs GRPO/Dr.GRPO/RF++-baseline/RLOO/DAPO/James-Stein over seeds and G, at "
        "equal answer budget, with each estimator's gradient noise against the exact gradient")


# the bound past which a run is refused without --force (docs/simulator.md, "Cost")
MAX_SECONDS = 3600.0
MAX_BYTES = 8 * 2**30


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per `SimOptions` field (`--answers-per-step` for `answers_per_step`), documented by the field;
    list-valued fields take several values. Plus the output flags, which do not change any number."""
    import dataclasses

    from verl_ebpo.tools.simulate.options import SimOptions

    for f in dataclasses.fields(SimOptions):
        default = (f.metadata.get("default_doc") or f"{f.default}").strip("`")
        kwargs = {"nargs": "+"} if isinstance(f.default, tuple) or f.name == "lr_grid" else {}
        parser.add_argument("--" + f.name.replace("_", "-"), dest=f.name, default=None, metavar=f.name.upper(),
                            help=f"{f.metadata['help']} (default {default})", **kwargs)
    parser.add_argument("--study", choices=("topics", "lr"), default=None,
                        help="run a study instead of the sweep: `topics` (topic order vs shuffled, EBPO's prior scopes; "
                        "docs/simulator.md, \"Topics\"); `lr` (each method's learning-rate envelope; \"Learning rate\")")
    parser.add_argument("--out", default="runs/simulate", help="output folder (default runs/simulate)")
    parser.add_argument("--force", action="store_true", help="run even past the cost bound (see the estimate)")
    parser.add_argument("--no-figure", action="store_true", help="skip the figure")
    parser.add_argument("--quiet", action="store_true", help="print only the tables and verdict counts")


def options_from_args_raw(args: argparse.Namespace) -> dict:
    """The SimOptions fields given on the command line, as text (list values joined by spaces)."""
    import dataclasses

    from verl_ebpo.tools.simulate.options import SimOptions

    names = [f.name for f in dataclasses.fields(SimOptions)]
    given = {k: getattr(args, k) for k in names if getattr(args, k, None) is not None}
    return {k: (" ".join(v) if isinstance(v, list) else v) for k, v in given.items()}


def options_from_args(args: argparse.Namespace):
    from verl_ebpo.tools.simulate.options import SimOptions

    return SimOptions.from_mapping(options_from_args_raw(args))


def estimate_cost(options) -> tuple[float, float]:
    """(seconds, bytes): the sweep's time on one core and its peak memory, from the options alone.

    Per run (a regime x estimator x G cell, all lr x seed rows at once; rows = len(lr grid) x (tune_seeds + seeds)):
    time = steps x rows x (1e-8 s x (answers per step x generation batches + (prompts + heldout) x (features + 2))
    + 8e-4 s for EBPO's per-seed call); memory = 0.6 GiB (Python, torch, verl) + 8 bytes x rows x ((prompts + heldout)
    x (features + 6) + the prompt stream + one step's samples). Calibrated on the development machine (quiet).
    Not counted: a grid extended past an edge (`regimes.run_cell`) runs up to 2 x MAX_EXTEND more lrs in a cell,
    one at a time (time up to that many lr's rows more; memory below the cell's own run)."""
    from verl_ebpo.tools.simulate.estimators import parse_estimator

    rows = len(options.lrs) * (options.tune_seeds + options.seeds)
    regimes = 1 if options.regime == "custom" else len(options.regime_names)
    pd = (options.prompts + options.heldout) * (options.features + 2)
    seconds, peak = 0.0, 0.0
    for e in options.estimators:
        spec = parse_estimator(e)
        for G in options.G:
            gen = options.answers_per_step * (options.max_gen_batches if spec.dynamic_sampling else 1)
            per = 1e-8 * (gen + pd) + (8e-4 if spec.per_seed else 0.0)
            seconds += regimes * options.steps * rows * per
            # the gradient measurement: (warmup + draws) batches x reporting seeds, every generation batch drawn
            grad_gen = (options.answers_per_step // G) * G * options.max_gen_batches
            seconds += regimes * (options.grad_draws + options.grad_warmup) * options.seeds * (
                1e-7 * (grad_gen + pd) + (8e-4 if spec.per_seed else 0.0))
            stream = options.budget // G + gen // G
            peak = max(peak, 8.0 * rows * ((options.prompts + options.heldout) * (options.features + 6) + stream + gen))
    return seconds, 0.6 * 2**30 + peak


def cost_line(options) -> tuple[str, bool]:
    """The printed estimate and whether it is within the bound."""
    seconds, nbytes = estimate_cost(options)
    ok = seconds <= MAX_SECONDS and nbytes <= MAX_BYTES
    return (f"estimated {seconds:,.0f} s on one core, {nbytes / 2**30:.1f} GiB peak (bound {MAX_SECONDS:,.0f} s, "
            f"{MAX_BYTES / 2**30:.0f} GiB)"), ok


def check_out_folder(out: str, figure: bool = True) -> None:
    """Refuse, before any work, an `--out` the results could not be written to: a path that is not a folder (or
    lies under a file), a folder (or the nearest existing one above it) this process cannot write, and any of
    the output files that exists as something other than a regular file (`verl_ebpo.tools.files.check_output_path`).
    Nothing is created. Raises ValueError (OutputPathError for a file) with one line naming the path."""
    import os

    from verl_ebpo.tools.files import check_output_path
    from verl_ebpo.tools.simulate.report import FILES

    if os.path.exists(out) and not os.path.isdir(out):
        raise ValueError(f"--out {out} exists and is not a folder; give a folder path")
    existing = os.path.abspath(out)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise ValueError(f"--out {out}: {existing} is not a folder, so the output folder cannot be made there")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"--out {out}: {existing} is not writable; choose another folder")
    for name in FILES:
        if figure or not name.endswith(".png"):
            check_output_path(os.path.join(out, name))


def command_line(options) -> str:
    """The canonical command that makes `options` (every option that differs from its default), for results files."""
    import dataclasses

    from verl_ebpo.tools.simulate.options import SimOptions

    words = ["verl-ebpo", "simulate"]
    defaults = SimOptions()
    for f in dataclasses.fields(SimOptions):
        value = getattr(options, f.name)
        if value != getattr(defaults, f.name):
            values = list(value) if isinstance(value, tuple) else [value]
            words += ["--" + f.name.replace("_", "-"), *(f"{v:g}" if isinstance(v, float) else str(v) for v in values)]
    return " ".join(words)


GRID_STEP = 3.5  # the widest ratio between neighbouring grid lrs that the 1-3 sequence (x3, x3.33) stays under


def grid_warnings(options) -> list[str]:
    """Before a sweep: an lr grid with neighbours more than GRID_STEP apart. The extension past an edge
    (`regimes.run_cell`) only searches outward, so a best lr between two grid values is never tried: with
    `--lr-grid 1 10`, a cell whose optimum is 3 but whose tuning AUC at 1 beats 10 walks down 0.3, 0.1, ... and
    can end at 0.01 (issue 41)."""
    grid = sorted(options.lrs)
    wide = [(a, b) for a, b in zip(grid, grid[1:]) if b / a > GRID_STEP]
    if not wide:
        return []
    gaps = ", ".join(f"{a:g} -> {b:g}" for a, b in wide)
    return [f"--lr-grid {' '.join(f'{x:g}' for x in grid)} has neighbours more than x{GRID_STEP:g} apart ({gaps}); a "
            "best lr between two of them is never tried (the grid is only extended outward, past its ends), so a "
            "cell may settle on an edge far from its best lr; use a 1-3 grid such as 0.1 0.3 1 3 10 30"]


def run(args: argparse.Namespace) -> int:
    import os

    from verl_ebpo.tools.files import OutputPathError

    if getattr(args, "study", None) == "topics":
        from verl_ebpo.tools.simulate.topics import main as topics_main

        return topics_main(args)
    if getattr(args, "study", None) == "lr":
        from verl_ebpo.tools.simulate.lr import main as lr_main

        return lr_main(args)
    try:
        options = options_from_args(args)
        estimate, ok = cost_line(options)
        if not ok and not args.force:
            raise ValueError(f"{estimate}: too large; use fewer seeds, steps, prompts, features or regimes, "
                             "or --force")
        check_out_folder(args.out, figure=not args.no_figure)  # refused before the sweep, not after it
    except ValueError as e:  # OutputPathError included
        print(f"verl-ebpo simulate: error: {e}", file=sys.stderr)
        return 2

    from verl_ebpo.tools.simulate.regimes import run_family
    from verl_ebpo.tools.simulate.report import (cells_table, family_table, lr_warnings, verdict_counts,
                                                 write_family_outputs)

    from tqdm import tqdm

    for line in grid_warnings(options):
        print(f"verl-ebpo simulate: warning: {line}", file=sys.stderr)
    names = ["custom"] if options.regime == "custom" else list(options.regime_names)
    cells = len(names) * len(options.estimators) * len(options.G)
    if not args.quiet:
        print(f"simulating regimes {names} x {len(options.estimators)} estimators x G {list(options.G)} x lr grid "
              f"{list(options.lrs)}; {options.seeds} seeds (+{options.tune_seeds} for tuning), {options.budget} "
              f"answers each; {estimate} ...", flush=True)
    # progress on stderr: cells done of total, elapsed and time left (--quiet: none)
    bar = tqdm(total=cells, desc="simulate", unit="cell", file=sys.stderr, disable=args.quiet, mininterval=0.5,
               bar_format="{desc}: {n_fmt}/{total_fmt} cells [{elapsed}<{remaining}]")

    def progress(regime, result, lr):
        bar.update(1)
        if not args.quiet:
            bar.write(f"  {regime:>16} {result.estimator:>10} G={result.G:<3} lr {lr:<5g} final "
                      f"{result.final.mean():.3f}  ({result.seconds:.1f} s)", file=sys.stdout)

    try:
        family = run_family(options, progress=progress)
    finally:
        bar.close()
    try:
        summary = write_family_outputs(family, args.out, figure=not args.no_figure, command=command_line(options))
    except (OutputPathError, OSError) as e:
        print(f"verl-ebpo simulate: error: cannot write to {args.out}: {e}", file=sys.stderr)
        return 1
    print(f"{family_table(summary)}\n\n{cells_table(summary)}\n\n{verdict_counts(summary)}")
    for line in lr_warnings(summary):
        print(f"verl-ebpo simulate: warning: {line}", file=sys.stderr)
    wrote = "summary.json, results.md, curves.csv" + ("" if args.no_figure else ", simulate.png")
    print(f"\n{summary['seconds']:.1f} s; wrote {wrote} in {args.out}")
    return 0
