"""A sweep's numbers as users read them: summary.json, the results tables, verdict counts, curves.csv, a figure.

Every interval is `verl_ebpo.tools.stats` (Student t over seeds); every comparison is EBPO minus a baseline paired
by seed (same task, same prompts); every verdict word is computed from its interval (`stats.classify`).
"""

from __future__ import annotations

import io
import json
import math
import os

import numpy as np

from verl_ebpo.tools.files import atomic_output, atomic_write_text
from verl_ebpo.tools.provenance import environment
from verl_ebpo.tools.simulate.engine import Sweep
from verl_ebpo.tools.simulate.estimators import parse_estimator
from verl_ebpo.tools.stats import (classify, family_counts, interval_of, mean_ci, mean_ci_rows, paired_diff_ci,
                                  signed)

FILES = ("summary.json", "results.md", "curves.csv", "simulate.png")


def _r(x: float, nd: int | None = None):
    """A JSON-safe float (None for NaN/inf); rounded only where `nd` is given (counts, seconds)."""
    if x is None or not math.isfinite(x):
        return None
    return float(x) if nd is None else round(float(x), nd)


def _ebpo_and_baselines(sweep: Sweep) -> tuple[list[str], list[str]]:
    labels = list(dict.fromkeys(label for label, _ in sweep.runs))
    ebpo = [label for label in labels if parse_estimator(label).is_ebpo]
    return ebpo, [label for label in labels if label not in ebpo]


GRAD_DELTA = 0.05  # |log(noise ratio)| below it: a practically equal gradient noise (5%)


def _grad_cell(g) -> dict:
    """A gradient cell of summary.json from a `gradient.GradientResult` (per-seed values in, intervals out)."""
    cos, noise, draw = mean_ci(g.cos_mean), mean_ci(np.log(g.noise)), mean_ci(g.cos_draw)
    return {
        "grad_cos_mean": _r(cos.mean), "grad_cos_mean_ci95": [_r(x) for x in cos.as_list()],
        "grad_noise": _r(float(np.exp(noise.mean))),  # geometric mean over seeds
        "grad_noise_ci95": [_r(float(np.exp(x))) if x is not None else None for x in noise.as_list()],
        "grad_cos_draw": _r(draw.mean), "grad_draws": g.draws,
        "grad_answers": _r(float(np.mean(g.answers))),
        "grad_noise_budget": _r(float(np.exp(np.mean(np.log(g.noise_budget))))),
        "grad_noise_per_seed": [_r(x) for x in g.noise],
    }


def _grad_comparison(ge, gb) -> dict:
    """EBPO's gradient noise over the baseline's, paired by seed, as a ratio with its interval (log scale)."""
    diff = paired_diff_ci(np.log(ge.noise), np.log(gb.noise))
    return {"noise_ratio": _r(float(np.exp(diff.mean))),
            "noise_ratio_ci95": [_r(float(np.exp(x))) if x is not None else None for x in diff.as_list()],
            "noise_class": classify(diff, GRAD_DELTA)}


def summarize(sweep: Sweep, negligible: float = 0.0, lrs: dict | None = None,
              grads: dict | None = None) -> dict:
    """The summary dict (summary.json): results per estimator and G, paired comparisons, verdicts.

    negligible: the practical threshold of `stats.verdict`; lrs: {(label, G): lr} chosen per cell (default: the
    options' first grid lr); grads: {(label, G):
    GradientResult} (the gradient statistics, added to cells and comparisons)."""
    grads = grads or {}
    from verl_ebpo.tools.simulate.regimes import auc, gain_shape

    o = sweep.options
    results: dict = {}
    for (label, G), run in sweep.runs.items():
        areas = mean_ci(auc(run.curve))
        first, half = gain_shape(run.curve)
        generated = np.maximum(run.generated, 1)
        final, held = mean_ci(run.final), mean_ci(run.heldout) if o.heldout else None
        zero = mean_ci(run.zero_adv_frac)
        results.setdefault(label, {})[str(G)] = {
            "final_mean": _r(final.mean),
            "ci95": [_r(x) for x in final.as_list()],
            "auc_mean": _r(areas.mean),
            "auc_ci95": [_r(x) for x in areas.as_list()],
            "lr": (lrs or {}).get((label, G), o.lrs[0]),
            "first_step_gain_frac": _r(float(np.nanmean(first))) if np.isfinite(first).any() else None,
            "steps_to_half_gain": _r(float(half.mean()), 2),
            "degenerate_discard_frac": _r(float((run.degenerate / generated).mean())) if run.degenerate is not None
            else None,
            "surplus_discard_frac": _r(float((run.surplus / generated).mean())) if run.surplus is not None else None,
            "zero_adv_frac": _r(zero.mean),
            "zero_adv_ci95": [_r(x) for x in zero.as_list()],
            "no_signal_frac": _r(float(run.no_signal_frac.mean())),
            "discarded_frac": _r(float(run.discarded_frac.mean())),
            "heldout_mean": _r(held.mean) if held else None,
            "heldout_ci95": [_r(x) for x in held.as_list()] if held else None,
            "initial_mean": _r(float(run.curve[:, 0].mean())),
            "answers_generated": _r(float(run.generated.mean()), 1),
            "answers_trained": _r(float(run.trained.mean()), 1),
            "updates": _r(float(run.updates.mean()), 2),
            "short_batches": _r(float(run.short_batches.mean()), 2),
            "ebpo_shrinkage_mean": _r(run.shrinkage_mean),
            "final_per_seed": [_r(x) for x in run.final],
            "seconds": _r(run.seconds, 2),
            **(_grad_cell(grads[(label, G)]) if (label, G) in grads else {}),
        }
    comparisons: dict = {}
    ebpo, baselines = _ebpo_and_baselines(sweep)
    pairs = [(e, b) for e in ebpo for b in baselines] + [(e, ebpo[0]) for e in ebpo[1:]]
    for e, b in pairs:
        key = f"{e}-{b}"
        for G in o.G:
            if (e, G) not in sweep.runs or (b, G) not in sweep.runs:
                continue
            ra, rb = sweep.runs[(e, G)], sweep.runs[(b, G)]
            diff = paired_diff_ci(ra.final, rb.final)
            adiff = paired_diff_ci(auc(ra.curve), auc(rb.curve))
            comparisons.setdefault(key, {})[str(G)] = {
                "diff": _r(diff.mean),
                "ci95": [_r(x) for x in diff.as_list()],
                "auc_diff": _r(adiff.mean),
                "auc_ci95": [_r(x) for x in adiff.as_list()],
                "class": classify(diff, negligible),
                "auc_class": classify(adiff, negligible),
            }
            if (e, G) in grads and (b, G) in grads:
                comparisons[key][str(G)].update(_grad_comparison(grads[(e, G)], grads[(b, G)]))
    return {
        "seeds": o.seeds,
        "G": list(o.G),
        "results": results,
        "comparisons": comparisons,
        "negligible": negligible,
        "budget_answers": o.budget,
        "order": o.resolved_order,
        "options": {k: list(v) if isinstance(v, tuple) else v for k, v in o.to_mapping().items()},
        "verl_functions": {label: parse_estimator(label).verl_name or "verl_ebpo james_stein_advantage"
                           for label in results},
        "seconds": _r(sweep.seconds, 2),
    }


def comparison_intervals(c: dict, n: int) -> dict:
    """The intervals of one comparison entry of summary.json over n seeds: {"final success": ..., "AUC": ...,
    "gradient noise": ...} (the last on the log scale, as it was classified; absent without a gradient)."""
    out = {"final success": interval_of(c["diff"], c["ci95"], n), "AUC": interval_of(c["auc_diff"], c["auc_ci95"], n)}
    if c.get("noise_ratio") is not None:
        out["gradient noise"] = interval_of(math.log(c["noise_ratio"]), [None if x is None else math.log(x)
                                                                         for x in c["noise_ratio_ci95"]], n)
    return out


KINDS = ("final success", "AUC", "gradient noise")


def _words(classes: dict) -> str:
    return ", ".join(f"{n} {k}" for k, n in sorted(classes.items(), key=lambda kv: (-kv[1], kv[0])))


def holm_words(counts: dict) -> str:
    """'k resolved after Holm (h higher, l lower)' for a `stats.family_counts` result."""
    return (f"{counts['holm_resolved']} resolved after Holm ({counts['holm_higher']} higher, "
            f"{counts['holm_lower']} lower)")


def family_of(summary: dict, kind: str, pairs=None) -> list:
    """The intervals of one kind ("final success", "AUC", "gradient noise") over every regime, pair and G (pairs:
    only these comparison keys), in the summary's order."""
    return [iv for name, comps in summary["regime_comparisons"].items() for key, per_g in comps.items()
            if pairs is None or key in pairs for G, c in per_g.items()
            for iv in [comparison_intervals(c, summary["seeds"]).get(kind)] if iv is not None]


def verdict_counts(summary: dict) -> str:
    """One sentence: how many comparisons of each kind (final, AUC, gradient noise) got each verdict, and how many
    stay resolved after Holm's correction over that kind's family (family-wise error 5%)."""
    parts = []
    for kind in KINDS:
        fam = family_of(summary, kind)
        if fam:
            c = family_counts(fam, summary["negligible"] if kind != "gradient noise" else
                              summary.get("grad_delta", GRAD_DELTA))
            parts.append(f"{kind} ({c['n']}): {_words(c['classes'])}; {holm_words(c)}")
    return ("Verdicts, each from its own 95% interval (final success and AUC: delta "
            f"{summary['negligible']:g}; gradient noise: delta {summary.get('grad_delta', GRAD_DELTA):g} in log "
            "ratio; \"higher\"/\"lower\" only when the whole interval lies beyond delta), and how many stay resolved "
            "after Holm's correction over each family (family-wise error 5%) -- " + "; ".join(parts) + ".")


def curves_csv(sweep: Sweep) -> str:
    """estimator,G,answers,mean,lo,hi: the success curve against answers generated, over seeds."""
    out = io.StringIO()
    out.write("estimator,G,answers,mean,ci95_lo,ci95_hi\n")
    n = sweep.options.answers_per_step
    for (label, G), run in sweep.runs.items():
        means, los, his = mean_ci_rows(run.curve.T)  # curve: (seeds, points)
        for k, (mean, *bounds) in enumerate(zip(means, los, his)):
            lo, hi = ("" if not math.isfinite(x) else f"{x:.6f}" for x in bounds)
            out.write(f"{label},{G},{k * n},{mean:.6f},{lo},{hi}\n")
    return out.getvalue()


def plot(sweep: Sweep, path: str) -> None:
    """Per G, success against answers generated (mean over seeds and its 95% band), one line per estimator."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    Gs = list(sweep.options.G)
    labels = list(dict.fromkeys(label for label, _ in sweep.runs))
    fig, axes = plt.subplots(1, len(Gs), figsize=(3.6 * len(Gs), 3.6), squeeze=False)
    for ax, G in zip(axes[0], Gs):
        for i, label in enumerate(labels):
            run = sweep.runs.get((label, G))
            if run is None:
                continue
            x = np.arange(run.curve.shape[1]) * sweep.options.answers_per_step
            m, lo, hi = mean_ci_rows(run.curve.T)  # curve: (seeds, points)
            color, ls = plt.get_cmap("tab10")(i % 10), "--" if parse_estimator(label).is_ebpo else "-"
            ax.plot(x, m, color=color, lw=1.2, ls=ls, label=label)
            if run.curve.shape[0] > 1:
                ax.fill_between(x, lo, hi, color=color, alpha=0.2, lw=0)
        ax.set_title(f"G = {G}", fontsize=9)
        ax.set_xlabel("answers generated")
    axes[0, 0].set_ylabel("expected success")
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    with atomic_output(path) as tmp:
        fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)


def share(x: float) -> str:
    """A share to two decimals; one that rounds to zero is 0.00, whatever its sign."""
    text = f"{x:.2f}"
    return "0.00" if text == "-0.00" else text


# ---- the family of regimes (the default report) ----

PAIRS = ("ebpo-drgrpo", "ebpo-js")  # the headline rows: EBPO's expectation-equivalent and its closest peer


def summarize_family(family) -> dict:
    """summary.json of a family run: `results`/`comparisons` of the `shared` regime (or the only one run) as
    before, plus `regimes[name][est][G]` (final_mean, ci95, auc_mean, lr, ...) and `regime_comparisons`."""
    from verl_ebpo.tools.simulate.regimes import LR_RULE, REGIMES

    o = family.options
    per = {name: summarize(sweep, o.negligible, family.lrs[name],
                           grads=family.gradients.get(name))
           for name, sweep in family.sweeps.items()}
    head = per.get("shared") or next(iter(per.values()))
    return {
        **head,
        "regime": o.regime,
        "regimes": {name: s["results"] for name, s in per.items()},
        "regime_comparisons": {name: s["comparisons"] for name, s in per.items()},
        "regime_settings": {name: {k: list(v) if isinstance(v, tuple) else v for k, v in REGIMES[name].items()}
                            for name in per if name in REGIMES},
        "tune_auc": {name: {f"{label}|{G}": v for (label, G), v in t.items()} for name, t in family.tune_auc.items()},
        "lr_grid": sorted(o.lrs),
        "lr_grids": {name: {f"{label}|{G}": v for (label, G), v in t.items()} for name, t in family.grids.items()},
        "lr_rule": LR_RULE,
        "tune_seeds": o.tune_seed_list,
        "negligible": o.negligible,
        "grad_delta": GRAD_DELTA,
        "seconds": _r(family.seconds, 2),
    }


def _ci(mean, ci) -> str:
    if mean is None:
        return "n/a"
    if ci[0] is None:
        return signed(mean)
    return f"{signed(mean)} [{signed(ci[0])}, {signed(ci[1])}]"


def _ratio(c) -> str:
    if c.get("noise_ratio") is None:
        return ""
    lo, hi = c["noise_ratio_ci95"]
    return f"{c['noise_ratio']:.3f}" + ("" if lo is None else f" [{lo:.3f}, {hi:.3f}]")


def family_table(summary: dict, pairs=None) -> str:
    """Markdown: per regime and G, EBPO against each headline baseline: its gradient noise ratio (paired by seed,
    geometric mean [95% CI]) and the differences in final success and AUC, best-vs-best."""
    pairs = [p for p in (pairs or PAIRS) if any(p in c for c in summary["regime_comparisons"].values())]
    head = "| regime | G | " + " | ".join(f"{p} noise ratio | {p} final | {p} AUC" for p in pairs) + " |"
    rows = [head, "|---|---:|" + "---|---|---|" * len(pairs)]
    for name, comps in summary["regime_comparisons"].items():
        for G in summary["G"]:
            cells = []
            for p in pairs:
                c = comps.get(p, {}).get(str(G))
                cells += ["", "", ""] if c is None else [_ratio(c), _ci(c["diff"], c["ci95"]),
                                                         _ci(c["auc_diff"], c["auc_ci95"])]
            rows.append(f"| {name} | {G} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def gradient_table(summary: dict) -> str:
    """Markdown: every regime x G x estimator's gradient noise (tr Cov / |E g|^2, geometric mean over seeds) and
    the cosine of one batch's step with the exact gradient."""
    labels = list(dict.fromkeys(label for per in summary["regimes"].values() for label in per))
    rows = ["| regime | G | " + " | ".join(labels) + " |", "|---|---:|" + "---:|" * len(labels)]
    for name, per_est in summary["regimes"].items():
        for G in summary["G"]:
            cells = []
            for label in labels:
                c = per_est.get(label, {}).get(str(G), {})
                cells.append("" if c.get("grad_noise") is None else f"{c['grad_noise']:.3g} ({c['grad_cos_draw']:.3f})")
            rows.append(f"| {name} | {G} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def cells_table(summary: dict) -> str:
    """Markdown: every regime x estimator x G cell with its chosen lr and metrics."""
    rows = ["| regime | estimator | G | lr | final success [95% CI] | AUC | first step's share of the gain "
            "| steps to half the gain | discards: degenerate / surplus |", "|---|---|---:|---:|---|---:|---:|---:|---|"]
    for name, per_est in summary["regimes"].items():
        for label, per_g in per_est.items():
            for G, r in per_g.items():
                lo, hi = r["ci95"]
                ci = f"[{lo:.3f}, {hi:.3f}]" if lo is not None else "[n/a]"
                disc = ("" if not r.get("degenerate_discard_frac") and not r.get("surplus_discard_frac") else
                        f"{r['degenerate_discard_frac']:.3f} / {r['surplus_discard_frac']:.3f}")
                first = "n/a" if r.get("first_step_gain_frac") is None else share(r["first_step_gain_frac"])
                rows.append(f"| {name} | {label} | {G} | {r['lr']:g} | {r['final_mean']:.3f} {ci} | {r['auc_mean']:.3f} "
                            f"| {first} | {r['steps_to_half_gain']:g} | {disc} |")
    return "\n".join(rows)


def family_markdown(summary: dict) -> str:
    return (
        f"# verl-ebpo simulate: {len(summary['regimes'])} regime(s)\n\n{summary['seeds']} reporting seeds and "
        f"{len(summary['tune_seeds'])} tuning seeds, G in {summary['G']}, budget {summary['budget_answers']} answers "
        f"per run, Adam, lr grid {summary['lr_grid']} (chosen per estimator, regime and G: "
        f"{summary['lr_rule']}); {summary['seconds']:.1f} s.\n\nAUC: mean success over the run (area under success "
        "vs answers generated / budget).\n\n## EBPO against Dr.GRPO and James-Stein: gradient noise ratio, "
        "final success and AUC differences, paired by seed, 95% CI\n\n"
        f"{family_table(summary)}\n\n## Gradient noise tr Cov(g) / |E g|^2 at the initial policy (cosine of one "
        f"batch's step with the exact gradient)\n\n{gradient_table(summary)}\n\n## Cells\n\n{cells_table(summary)}\n\n{verdict_counts(summary)}\n"
    )


def family_curves_csv(family) -> str:
    """regime,estimator,G,answers,mean,lo,hi."""
    out = io.StringIO()
    out.write("regime,estimator,G,answers,mean,ci95_lo,ci95_hi\n")
    for name, sweep in family.sweeps.items():
        for line in curves_csv(sweep).splitlines()[1:]:
            out.write(f"{name},{line}\n")
    return out.getvalue()


def write_family_outputs(family, out_dir: str, figure: bool = True, command: str | None = None) -> dict:
    """Write FILES into out_dir (created if missing), each atomically, for a family run; the figure shows the
    first regime. command: the command line that made it (kept in summary.json, quoted by the docs)."""
    summary = summarize_family(family)
    if command is not None:
        summary["command"] = command
    summary["environment"] = environment()  # what computed it (the last digits depend on it)
    os.makedirs(out_dir, exist_ok=True)
    atomic_write_text(os.path.join(out_dir, "summary.json"), json.dumps(summary, indent=2) + "\n")
    atomic_write_text(os.path.join(out_dir, "results.md"), family_markdown(summary))
    atomic_write_text(os.path.join(out_dir, "curves.csv"), family_curves_csv(family))
    if figure:
        first = family.sweeps["shared" if "shared" in family.sweeps else next(iter(family.sweeps))]
        plot(first, os.path.join(out_dir, "simulate.png"))
    return summary


def lr_edges(summary: dict) -> list[str]:
    """The cells ('regime/estimator/G') whose chosen lr is the smallest or largest of their own grid (extended past
    an edge by `regimes.run_cell`: `lr_grids`)."""
    grids = summary.get("lr_grids", {})
    return [f"{name}/{label}/{G}" for name, per in summary["regimes"].items() for label, per_g in per.items()
            for G, c in per_g.items() for grid in [grids.get(name, {}).get(f"{label}|{G}", summary["lr_grid"])]
            if len(grid) > 1 and c["lr"] in (min(grid), max(grid))]


def lr_extended(summary: dict) -> list[str]:
    """The cells whose grid was extended past the sweep's ('regime/estimator/G: lo-hi')."""
    return [f"{name}/{key.replace('|', '/')}: {min(g):g}-{max(g):g}" for name, per in summary.get("lr_grids", {}).items()
            for key, g in per.items() if len(g) != len(summary["lr_grid"])]


def lr_warnings(summary: dict) -> list[str]:
    """What a run prints when a grid was too narrow for a cell."""
    edges, extended = lr_edges(summary), lr_extended(summary)
    return ([f"chosen lr at an edge of its grid (the best may lie beyond it): {', '.join(edges)}"] if edges else []) + (
        [f"lr grid too narrow, extended past an edge (`regimes.run_cell`): {'; '.join(extended)}"] if extended else [])
