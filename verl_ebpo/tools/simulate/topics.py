"""The topic study: does ordering batches by topic lower EBPO's prior error and gradient noise?

    verl-ebpo simulate --study topics [--seeds N --G 2 8 --grad-draws D ...]

The paper's proposition: ordering batches by topic lowers the prior's error (the prior mean is closer to a prompt's
true success rate). Here prompts come in K topics with different mean success rates (`task.make_task`: topic k has
m_k ~ Beta(A, B), its prompts p0 ~ Beta(c m_k, c (1 - m_k))). At the initial policy, for both presentation orders

    random  every batch B distinct prompts drawn uniformly (verl's `data.shuffle=True`; `gradient.measure`)
    topic   consecutive batches of the topic-sorted stream (`task.stream(order="topic")`: one topic after another)

each estimator's one-step gradient noise tr Cov(g) / |E g|^2 (`gradient.measure`, paired by seed across estimators)
and its prior error, the mean over groups of (mu_prior - p_q)^2, with mu_prior the prior mean that group's baseline
was shrunk toward and p_q the prompt's true success probability, are measured for verl's own functions
(`ESTIMATORS`): Dr.GRPO (no prior: what batch composition alone does) and `ebpo` with a running, a decayed
(prior_decay=DECAY, horizon about two batches: it can follow the topic) and a per-batch prior (under topic order,
the topic). `blowups` counts EBPO's batches with max|A| > sqrt(rows), impossible for a correct `normalize=batch`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import time

import numpy as np
import torch

from verl_ebpo.tools.provenance import environment

F64 = torch.float64
TOPIC_DEFAULTS = {  # the study's model: clustered topics, the default regimes' `shared` knobs otherwise
    "regime": "custom", "topics": "4", "concentration": "20", "beta": "0.5 1.5", "transfer": "0.3 0.3 0.2 0.2",
    "score_noise": "10", "heldout": "0", "seeds": "10", "G": "2 8 16", "grad_draws": "64", "grad_warmup": "16",
}
DECAY = 0.5  # the decayed prior's lambda: a horizon of about 2 batches (a topic is 1, 4, 8 batches at G = 2, 8, 16)
ESTIMATORS = {"drgrpo": "drgrpo", "ebpo": "ebpo", "ebpo_decayed": f"ebpo:prior_decay={DECAY}",
              "ebpo_batch": "ebpo:prior_scope=batch"}  # label -> verl estimator (`estimators.parse_estimator`)
ORDERS = ("random", "topic")
NOISE_DELTA = 0.05  # |log ratio| below it: practically equal (as report.GRAD_DELTA)
REFUSED = ("estimators", "order")  # the study sets these itself


# ---- the study ----

def study_options(given: dict):
    """SimOptions of the study: TOPIC_DEFAULTS under the options given. ValueError for an option it sets itself or
    `grad_draws` < 2 (no variance to measure)."""
    from verl_ebpo.tools.simulate.options import SimOptions

    for name in REFUSED:
        if name in given:
            raise ValueError(f"--{name} is set by --study topics (estimators {' '.join(ESTIMATORS)}, orders "
                             f"{' and '.join(ORDERS)}); drop it")
    options = SimOptions.from_mapping(given, **TOPIC_DEFAULTS)
    if options.grad_draws < 2:
        raise ValueError(f"simulate.grad_draws={options.grad_draws}: the topic study measures the gradient noise "
                         "over the draws; give at least 2")
    return options


def command_of(options) -> str:
    from verl_ebpo.tools.simulate import command_line

    return command_line(options).replace("verl-ebpo simulate", "verl-ebpo simulate --study topics", 1)


def estimate_seconds(options) -> float:
    """The study's time on one core: per (order, estimator, G) (warmup + draws) x seeds calls, about 2 ms each
    for EBPO's per-seed calls (the rest is small), calibrated on the development machine."""
    per_call = 2e-3 + 1e-7 * options.prompts * (options.features + 2)
    return len(ORDERS) * len(ESTIMATORS) * len(options.G) * (options.grad_warmup + options.grad_draws) * (
        options.seeds * per_call)


class CountingCaller:
    """verl's `ebpo` through `AdvantageCaller`, counting per seed the batches with max|A| > sqrt(rows)."""

    def __init__(self, spec, n_seeds: int):
        from verl_ebpo.tools.simulate.estimators import AdvantageCaller

        self.inner = AdvantageCaller(spec, n_seeds)
        self.priors = self.inner.priors
        self.blowups = np.zeros(n_seeds)

    def __call__(self, scores: torch.Tensor, group_seed: torch.Tensor, group_size: int) -> torch.Tensor:
        adv = self.inner(scores, group_seed, group_size)
        seed_rows = group_seed.repeat_interleave(group_size)
        n = torch.bincount(seed_rows, minlength=len(self.blowups)).to(F64)
        top = torch.zeros(len(self.blowups), dtype=F64).scatter_reduce_(0, seed_rows, adv.abs(), "amax",
                                                                        include_self=True)
        self.blowups += (top > n.sqrt()).numpy()
        return adv


def run_study(options, progress=None) -> dict:
    """Every order x estimator x G; returns {order: {label: {G: GradientResult}}} (reporting seeds) and
    {(order, label, G): (S,) batches with max|A| > sqrt(rows), warm-up included (None without a prior)}."""
    from verl_ebpo.tools.simulate.engine import build_task, one_torch_thread
    from verl_ebpo.tools.simulate.estimators import parse_estimator
    from verl_ebpo.tools.simulate.gradient import measure

    out: dict = {}
    blowups: dict = {}
    with one_torch_thread():
        task = build_task(options)
        for order in ORDERS:
            out[order] = {}
            for label, name in ESTIMATORS.items():
                out[order][label] = {}
                for G in options.G:
                    spec = parse_estimator(name)
                    caller = CountingCaller(spec, options.seeds) if spec.is_ebpo else None
                    res = measure(task, spec, G, options, options.seed_list, options.grad_draws,
                                  options.grad_warmup, order=order, caller=caller, prior_error=True)
                    out[order][label][G] = dataclasses.replace(res, estimator=label)
                    blowups[order, label, G] = None if caller is None else caller.blowups.copy()
                    if progress is not None:
                        progress(order, label, G)
    return out, blowups


def _r(x):
    return None if x is None or not math.isfinite(x) else float(x)


def _ratio(a: np.ndarray, b: np.ndarray) -> dict:
    """a / b paired by seed on the log scale: geometric-mean ratio, its 95% interval and class."""
    from verl_ebpo.tools.stats import classify, paired_diff_ci

    diff = paired_diff_ci(np.log(a), np.log(b))
    lo, hi = diff.as_list()
    return {"ratio": _r(float(np.exp(diff.mean))),
            "ci95": [None if lo is None else float(np.exp(lo)), None if hi is None else float(np.exp(hi))],
            "class": classify(diff, NOISE_DELTA)}


def summarize(results: dict, blowups: dict, options, seconds: float, command: str) -> dict:
    """summary.json of the study (`run_study`'s two results)."""
    from verl_ebpo.tools.stats import mean_ci

    cells: dict = {}
    for order, per in results.items():
        for label, per_g in per.items():
            for G, g in per_g.items():
                noise = mean_ci(np.log(g.noise))
                c = {"grad_noise": _r(float(np.exp(noise.mean))),
                     "grad_noise_ci95": [None if x is None else float(np.exp(x)) for x in noise.as_list()],
                     "grad_cos_mean": _r(float(np.mean(g.cos_mean))),
                     "grad_noise_per_seed": [float(x) for x in g.noise]}
                if blowups.get((order, label, G)) is not None:
                    c["blowups"] = int(blowups[order, label, G].sum())
                if g.prior_err is not None:  # geometric mean over seeds, as the noise (seeds differ by their task)
                    pe = mean_ci(np.log(g.prior_err))
                    c.update(prior_err=_r(float(np.exp(pe.mean))),
                             prior_err_ci95=[None if x is None else float(np.exp(x)) for x in pe.as_list()],
                             prior_err_per_seed=[float(x) for x in g.prior_err])
                cells.setdefault(order, {}).setdefault(label, {})[str(G)] = c
    comps: dict = {"order": {}}
    for label in ESTIMATORS:  # topic order over shuffled, per estimator and G
        for G in options.G:
            a, b = results["topic"][label][G], results["random"][label][G]
            entry = {"noise": _ratio(a.noise, b.noise)}
            if a.prior_err is not None:
                entry["prior_err"] = _ratio(a.prior_err, b.prior_err)
            comps["order"].setdefault(label, {})[str(G)] = entry
    return {
        "study": "topics", "command": command, "seconds": round(seconds, 1),
        "model": {k: (list(v) if isinstance(v, tuple) else v) for k, v in (
            ("topics", options.topics), ("concentration", options.concentration), ("beta", options.beta),
            ("transfer", options.transfer), ("score_noise", options.score_noise), ("prompts", options.prompts),
            ("answers_per_step", options.answers_per_step))},
        "G": list(options.G), "seeds": options.seeds, "draws": options.grad_draws, "warmup": options.grad_warmup,
        "estimators": list(ESTIMATORS), "orders": list(ORDERS), "decay": DECAY, "noise_delta": NOISE_DELTA,
        "cells": cells, "comparisons": comps,
    }


def _ci(x, ci, fmt="{:.3f}") -> str:
    if x is None:
        return "n/a"
    return fmt.format(x) + ("" if ci is None or ci[0] is None else f" [{fmt.format(ci[0])}, {fmt.format(ci[1])}]")


def cells_table(summary: dict) -> str:
    """Per estimator and G: gradient noise and prior error, shuffled and topic-ordered (geometric / plain means
    over seeds with 95% intervals)."""
    rows = ["| estimator | G | noise, shuffled | noise, topic order | prior error, shuffled | prior error, topic order "
            "| blow-ups, shuffled / topic order |", "|---|---:|---:|---:|---:|---:|---:|"]
    for label in summary["estimators"]:
        for G in summary["G"]:
            r, t = (summary["cells"][o][label][str(G)] for o in ORDERS)
            blow = "n/a" if "blowups" not in r else f"{r['blowups']} / {t['blowups']}"
            rows.append(f"| {label} | {G} | {_ci(r['grad_noise'], r['grad_noise_ci95'])} | "
                        f"{_ci(t['grad_noise'], t['grad_noise_ci95'])} | "
                        f"{_ci(r.get('prior_err'), r.get('prior_err_ci95'), '{:.4f}')} | "
                        f"{_ci(t.get('prior_err'), t.get('prior_err_ci95'), '{:.4f}')} | {blow} |")
    return "\n".join(rows)


def comparisons_table(summary: dict) -> str:
    """Ratios paired by seed: topic order over shuffled, per estimator."""
    rows = ["| comparison | G | noise ratio | verdict | prior-error ratio | verdict |", "|---|---:|---:|---|---:|---|"]
    for label, per_g in summary["comparisons"]["order"].items():
        for G, c in per_g.items():
            pe = c.get("prior_err")
            rows.append(f"| {label}: topic order / shuffled | {G} | {_ci(c['noise']['ratio'], c['noise']['ci95'])} "
                        f"| {c['noise']['class']} | "
                        + ("n/a | n/a |" if pe is None else f"{_ci(pe['ratio'], pe['ci95'])} | {pe['class']} |"))
    return "\n".join(rows)


def doc_blocks(summary: dict) -> dict:
    """docs/simulator.md's generated blocks of the study."""
    m = summary["model"]
    run = (f"`{summary['command']}`: {m['topics']} topics (concentration {m['concentration']:g}, topic means "
           f"~ Beta{tuple(m['beta'])}), {m['prompts']} prompts, {m['answers_per_step']} answers per batch, score "
           f"noise {m['score_noise']:g}; {summary['seeds']} seeds x {summary['draws']} measured batches after "
           f"{summary['warmup']} warm-up batches, per order x estimator x G in {summary['G']}; decayed prior "
           f"lambda = {summary['decay']:g}; {summary['seconds']:.0f} s.")
    return {"run": run, "cells": cells_table(summary), "comparisons": comparisons_table(summary),
            "readme": readme_block(summary)}


def readme_block(summary: dict) -> str:
    """One sentence for the README, beside its EBPO-topic run: what topic order did to EBPO's gradient noise."""
    order = summary["comparisons"]["order"]
    ebpo = order.get("ebpo", {})
    if not ebpo:
        return "(no EBPO in this study)"
    r = [c["noise"]["ratio"] for c in ebpo.values()]
    m = summary["model"]
    return (f"Topic order (this run's) raised EBPO's gradient noise {min(r) - 1:.0%}-{max(r) - 1:.0%} over shuffled "
            f"batches in the [simulator](docs/simulator.md#topics) (measured at a fixed policy, `normalize=batch`, "
            f"{m['topics']} topics of concentration {m['concentration']:g}).")


def results_markdown(summary: dict) -> str:
    b = doc_blocks(summary)
    return (f"# Topic study\n\n{b['run']}\n\n## Gradient noise and prior error\n\n{b['cells']}\n\n## Paired ratios"
            f"\n\n{b['comparisons']}\n")


FILES = ("summary.json", "results.md")


def main(args) -> int:
    """`verl-ebpo simulate --study topics`: exit 0, or 2 with one line for bad options or an unusable --out."""
    from tqdm import tqdm

    from verl_ebpo.tools.files import OutputPathError, atomic_write_text, check_output_path
    from verl_ebpo.tools.simulate import MAX_SECONDS, options_from_args_raw

    try:
        options = study_options(options_from_args_raw(args))
        seconds = estimate_seconds(options)
        if seconds > MAX_SECONDS and not args.force:
            raise ValueError(f"estimated {seconds:,.0f} s on one core (bound {MAX_SECONDS:,.0f} s): too large; use "
                             "fewer seeds, draws or G, or --force")
        if os.path.exists(args.out) and not os.path.isdir(args.out):
            raise ValueError(f"--out {args.out} exists and is not a folder; give a folder path")
        for name in FILES:
            check_output_path(os.path.join(args.out, name))
    except ValueError as e:  # OutputPathError included
        print(f"verl-ebpo simulate: error: {e}", file=sys.stderr)
        return 2
    total = len(ORDERS) * len(ESTIMATORS) * len(options.G)
    if not args.quiet:
        print(f"topic study: {len(ORDERS)} orders x {len(ESTIMATORS)} estimators x G {list(options.G)}, "
              f"{options.seeds} seeds; estimated {seconds:,.0f} s on one core ...", flush=True)
    bar = tqdm(total=total, desc="topics", unit="cell", file=sys.stderr, disable=args.quiet, mininterval=0.5)
    t0 = time.perf_counter()
    try:
        results, blowups = run_study(options, progress=lambda *_: bar.update(1))
    finally:
        bar.close()
    summary = summarize(results, blowups, options, time.perf_counter() - t0, command_of(options))
    summary["environment"] = environment()  # what computed it (the last digits depend on it)
    try:
        os.makedirs(args.out, exist_ok=True)
        atomic_write_text(os.path.join(args.out, "summary.json"), json.dumps(summary, indent=2) + "\n")
        atomic_write_text(os.path.join(args.out, "results.md"), results_markdown(summary))
    except (OutputPathError, OSError) as e:
        print(f"verl-ebpo simulate: error: cannot write to {args.out}: {e}", file=sys.stderr)
        return 1
    print(cells_table(summary))
    print()
    print(comparisons_table(summary))
    print(f"\n{summary['seconds']:.1f} s; wrote {os.path.join(args.out, 'summary.json')} and results.md")
    return 0
