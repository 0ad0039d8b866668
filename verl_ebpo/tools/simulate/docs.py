"""The simulator's numbers quoted by the docs (rendered from a committed summary.json; tests/test_docs_numbers.py),
and the command that rewrites the docs' generated result blocks from the committed results files (the
simulator's and the demo's).

    python -m verl_ebpo.tools.simulate.docs [--root .]

The same command as `python -m verl_ebpo.tools.results_docs`, kept under its first name.
"""

from __future__ import annotations

from verl_ebpo.tools.results_docs import main, update
from verl_ebpo.tools.simulate.estimators import parse_estimator
from verl_ebpo.tools.simulate.report import GRAD_DELTA, PAIRS, cells_table, family_table, gradient_table, share

__all__ = ["doc_blocks", "lr_edges", "lr_extended", "main", "readme_block", "update", "verdict_counts"]


def verdict_counts(summary: dict) -> str:
    """One sentence: how many comparisons of each kind (final, AUC, gradient noise) got each verdict."""
    from collections import Counter

    counts = {k: Counter() for k in ("final success", "AUC", "gradient noise")}
    for comps in summary["regime_comparisons"].values():
        for per_g in comps.values():
            for c in per_g.values():
                counts["final success"][c["class"]] += 1
                counts["AUC"][c["auc_class"]] += 1
                if "noise_class" in c:
                    counts["gradient noise"][c["noise_class"]] += 1
    parts = []
    for what, counter in counts.items():
        if counter:
            words = ", ".join(f"{n} {k}" for k, n in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0])))
            parts.append(f"{what} ({sum(counter.values())}): {words}")
    return ("Verdicts, 95% intervals not corrected for multiplicity (final success and AUC: delta "
            f"{summary['negligible']:g}; gradient noise: delta {summary.get('grad_delta', GRAD_DELTA):g} in log "
            "ratio) -- " + "; ".join(parts) + ".")


def lr_edges(summary: dict) -> list[str]:
    """The cells whose chosen lr is the smallest or largest of their grid ('regime/estimator/G'): the cell's own
    grid, extended past an edge by `regimes.run_cell` (`lr_grids`), else the sweep's."""
    grids = summary.get("lr_grids", {})
    out = []
    for name, per in summary["regimes"].items():
        for label, per_g in per.items():
            for G, c in per_g.items():
                grid = grids.get(name, {}).get(f"{label}|{G}", summary["lr_grid"])
                if len(grid) > 1 and c["lr"] in (min(grid), max(grid)):
                    out.append(f"{name}/{label}/{G}")
    return out


def lr_extended(summary: dict) -> list[str]:
    """The cells whose grid was extended past the sweep's ('regime/estimator/G: lo-hi')."""
    base = summary["lr_grid"]
    return [f"{name}/{key.replace('|', '/')}: {min(g):g}-{max(g):g}" for name, per in summary.get("lr_grids", {}).items()
            for key, g in per.items() if len(g) != len(base)]


def _noise_ratios(summary: dict, pair: str) -> list[tuple[str, str, dict]]:
    return [(name, G, c) for name, comps in summary["regime_comparisons"].items()
            for G, c in comps.get(pair, {}).items() if c.get("noise_ratio") is not None]


def findings(summary: dict) -> str:
    """Bullet points computed from the summary: EBPO's gradient noise against each baseline (range of the
    paired ratios over regimes and G, and their verdicts), and its learning-curve differences' verdicts."""
    from collections import Counter

    ebpo = [e for e in next(iter(summary["regimes"].values())) if parse_estimator(e).is_ebpo]
    if not ebpo:
        return "- (no EBPO estimator in this run)"
    lines = []
    for key in (k for k in next(iter(summary["regime_comparisons"].values())) if k.startswith(ebpo[0] + "-")):
        items = _noise_ratios(summary, key)
        if not items:
            continue
        ratios = [c["noise_ratio"] for _, _, c in items]
        lo_i, hi_i = min(range(len(items)), key=lambda i: ratios[i]), max(range(len(items)), key=lambda i: ratios[i])
        kinds = Counter(c["noise_class"] for _, _, c in items)
        auc = Counter(c["auc_class"] for comps in summary["regime_comparisons"].values()
                      for c in comps.get(key, {}).values())
        words = lambda cnt: ", ".join(f"{n} {k}" for k, n in sorted(cnt.items(), key=lambda kv: (-kv[1], kv[0])))  # noqa: E731
        lines.append(
            f"- `{key}`: gradient noise ratio {ratios[lo_i]:.3f} ({items[lo_i][0]}, G={items[lo_i][1]}) to "
            f"{ratios[hi_i]:.3f} ({items[hi_i][0]}, G={items[hi_i][1]}); noise verdicts: {words(kinds)}; AUC "
            f"verdicts: {words(auc)}.")
    return "\n".join(lines)


def doc_blocks(summary: dict) -> dict:
    """The docs' generated blocks, each rendered from `summary` alone."""
    cells = [c for per in summary["regimes"].values() for per_g in per.values() for c in per_g.values()]
    firsts = [c["first_step_gain_frac"] for c in cells if c.get("first_step_gain_frac") is not None]
    halves = [c["steps_to_half_gain"] for c in cells]
    edges, extended = lr_edges(summary), lr_extended(summary)
    run = (f"`{summary.get('command', 'verl-ebpo simulate')}`: {len(summary['regimes'])} regimes x "
           f"{len(next(iter(summary['regimes'].values())))} estimators x G in {summary['G']}, lr grid "
           f"{summary['lr_grid']}, {summary['seeds']} reporting + {len(summary['tune_seeds'])} tuning seeds, "
           f"{summary['budget_answers']:,} answers per run, {summary['seconds']:.0f} s. At each cell's chosen lr "
           f"the first step makes {share(min(firsts))} to {share(max(firsts))} of the run's final gain and half the gain "
           f"takes {min(halves):g} to {max(halves):g} steps; "
           + (f"chosen lr at an edge of its grid: {', '.join(edges)}." if edges else
              "every chosen lr lies strictly inside its grid.")
           + (f" Grids extended past an edge (`regimes.run_cell`): {'; '.join(extended)}." if extended else
              " No grid needed extending."))
    return {
        "run": run,
        "findings": findings(summary),
        "headline": family_table(summary),
        "gradient": gradient_table(summary),
        "cells": cells_table(summary),
        "counts": verdict_counts(summary),
    }


def readme_block(summary: dict) -> str:
    """The README's table: per regime, EBPO's gradient noise over Dr.GRPO's and over James-Stein's at each G
    (paired by seed, geometric mean), and a sentence with the learning-curve verdicts of those pairs."""
    from collections import Counter

    Gs = [str(g) for g in summary["G"]]
    head = ("| regime | " + " | ".join(f"EBPO / Dr.GRPO, G={g}" for g in Gs) + " | "
            + " | ".join(f"EBPO / JS, G={g}" for g in Gs) + " |")
    rows = [head, "|---|" + "---:|" * (2 * len(Gs))]
    auc = Counter()
    for name, comps in summary["regime_comparisons"].items():
        cells = []
        for p in PAIRS:
            for g in Gs:
                c = comps.get(p, {}).get(g)
                cells.append("" if c is None or c.get("noise_ratio") is None else f"{c['noise_ratio']:.2f}")
                if c is not None:
                    auc[c["auc_class"]] += 1
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    words = ", ".join(f"{n} {k}" for k, n in sorted(auc.items(), key=lambda kv: (-kv[1], kv[0])))
    return "\n".join(rows) + f"\n\nAUC (mean success over the run), EBPO against these two: {words}."


if __name__ == "__main__":
    raise SystemExit(main())
