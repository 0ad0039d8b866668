"""`verl-ebpo simulate`: a seeded RLVR simulator -- EBPO vs verl's GRPO, Dr.GRPO, RLOO, DAPO in a minute.

A policy learns many prompts of varied difficulty from binary rewards. Every advantage comes from verl's own
registered estimator function (`get_adv_estimator_fn`, `ebpo` through this package's plug-in), called as
verl's trainer calls it; DAPO is GRPO plus dynamic sampling (degenerate groups resampled, every answer
generated counted). All estimators get the same answer budget; G is swept; seeds run as a batch dimension.

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

HELP = "simulate RLVR learning: EBPO vs GRPO/Dr.GRPO/RLOO/DAPO over seeds and G, at equal answer budget"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from verl_ebpo.tools.simulate.options import SimOptions

    d = SimOptions()
    p = parser
    p.add_argument("--out", default="runs/simulate", help="output folder (default runs/simulate)")
    p.add_argument("--G", nargs="+", default=None, help=f"group sizes (default {' '.join(map(str, d.G))})")
    p.add_argument("--seeds", default=None, help=f"number of seeds (default {d.seeds})")
    p.add_argument("--seed", default=None, help=f"first seed (default {d.seed})")
    p.add_argument("--estimators", nargs="+", default=None,
                   help=f"estimators (default {' '.join(d.estimators)}); also rfpp_baseline, grpo_loop, rloo_loop, "
                   "and NAME:key=value,... e.g. ebpo:prior_decay=0.9")
    p.add_argument("--prompts", default=None, help=f"training prompts (default {d.prompts})")
    p.add_argument("--heldout", default=None, help=f"held-out prompts (default {d.heldout})")
    p.add_argument("--beta", nargs=2, default=None, metavar=("A", "B"),
                   help=f"difficulty: p0 ~ Beta(A, B) (default {d.beta[0]:g} {d.beta[1]:g})")
    p.add_argument("--topics", default=None, help=f"topics with clustered difficulty (default {d.topics})")
    p.add_argument("--concentration", default=None, help=f"within-topic concentration c (default {d.concentration:g})")
    p.add_argument("--order", default=None, choices=("auto", "random", "topic"),
                   help="presentation order (default auto: topic when --topics > 1, else random)")
    p.add_argument("--steps", default=None, help=f"steps; budget = steps x answers-per-step (default {d.steps})")
    p.add_argument("--answers-per-step", default=None, help=f"answers per training batch (default {d.answers_per_step})")
    p.add_argument("--max-gen-batches", default=None, help=f"DAPO: generation batches per step at most "
                   f"(default {d.max_gen_batches})")
    p.add_argument("--optimizer", default=None, choices=("adam", "sgd", "nsgd"), help=f"(default {d.optimizer})")
    p.add_argument("--lr", default=None, help=f"learning rate (default {d.lr:g})")
    p.add_argument("--score-noise", default=None, help=f"sigma_n (default {d.score_noise:g})")
    p.add_argument("--features", default=None, help=f"feature dimension d (default {d.features})")
    p.add_argument("--transfer", nargs=4, default=None, metavar=("GLOB", "TOPIC", "FEAT", "OWN"),
                   help=f"logit kernel weights (default {' '.join(f'{c:g}' for c in d.transfer)})")
    p.add_argument("--no-figure", action="store_true", help="skip the figure")
    p.add_argument("--quiet", action="store_true", help="print only the table and verdicts")


_KEYS = ("G", "seeds", "seed", "estimators", "prompts", "heldout", "beta", "topics", "concentration", "order",
         "steps", "answers_per_step", "max_gen_batches", "optimizer", "lr", "score_noise", "features", "transfer")


def options_from_args(args: argparse.Namespace):
    from verl_ebpo.tools.simulate.options import SimOptions

    given = {k: getattr(args, k) for k in _KEYS if getattr(args, k, None) is not None}
    if "estimators" in given:
        given["estimators"] = " ".join(given["estimators"])
    return SimOptions.from_mapping({k: (" ".join(v) if isinstance(v, list) else v) for k, v in given.items()})


def check_out_folder(out: str, figure: bool = True) -> None:
    """Refuse, before any work, an `--out` the results could not be written to: a path that is not a folder (or
    lies under a file), a folder (or the nearest existing one above it) this process cannot write, and any of
    the output files that exists as something other than a regular file (`verl_ebpo.files.check_output_path`).
    Nothing is created. Raises ValueError (OutputPathError for a file) with one line naming the path."""
    import os

    from verl_ebpo.files import check_output_path
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


def run(args: argparse.Namespace) -> int:
    import os

    from verl_ebpo.files import OutputPathError

    try:
        options = options_from_args(args)
        check_out_folder(args.out, figure=not args.no_figure)  # refused before the sweep, not after it
    except ValueError as e:  # OutputPathError included
        print(f"verl-ebpo simulate: error: {e}", file=sys.stderr)
        return 2

    from verl_ebpo.tools.simulate.engine import run_sweep
    from verl_ebpo.tools.simulate.report import comparison_table, results_table, write_outputs

    def progress(result):
        if not args.quiet:
            print(f"  {result.estimator:>14} G={result.G:<3} final {result.final.mean():.3f}  "
                  f"({result.seconds:.1f} s)", flush=True)

    if not args.quiet:
        print(f"simulating {len(options.estimators)} estimators x G {list(options.G)} x {options.seeds} seeds, "
              f"{options.budget} answers each ...", flush=True)
    sweep = run_sweep(options, progress=progress)
    try:
        summary = write_outputs(sweep, args.out, figure=not args.no_figure)
    except (OutputPathError, OSError) as e:
        print(f"verl-ebpo simulate: error: cannot write to {args.out}: {e}", file=sys.stderr)
        return 1
    print(results_table(summary))
    print()
    print(comparison_table(summary))
    print()
    for sentence in summary["verdicts"]:
        print(sentence)
    print(f"\n{summary['seconds']:.1f} s; wrote {os.path.join(args.out, 'summary.json')} and the figure, table, curves")
    return 0


__all__ = ["HELP", "add_arguments", "check_out_folder", "options_from_args", "run"]
