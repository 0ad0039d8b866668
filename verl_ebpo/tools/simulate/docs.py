"""The simulator's numbers quoted by the docs, rendered from a committed summary.json (tests/test_docs_numbers.py).

The command that rewrites the docs' blocks is `python -m verl_ebpo.tools.results_docs`, which imports this
module (this module does not import it back).
"""

from __future__ import annotations

import math

import numpy as np

from verl_ebpo.tools.simulate.estimators import parse_estimator
from verl_ebpo.tools.simulate.report import (GRAD_DELTA, PAIRS, _words, cells_table, comparison_intervals, family_of,
                                             family_table, gradient_table, holm_words, share, verdict_counts)
from verl_ebpo.tools.stats import classify, family_counts, signed

__all__ = ["doc_blocks", "drift_blocks", "holm_words", "lr_edges", "lr_extended", "lr_warnings", "readme_block", "verdict_counts"]

def lr_warnings(summary: dict) -> list[str]:
    """Lines a run prints when a grid was too narrow for a cell: its chosen lr at an edge of its (extended) grid,
    or its grid extended past the given one."""
    out = []
    edges, extended = lr_edges(summary), lr_extended(summary)
    grids, tune = summary.get("lr_grids", {}), summary.get("tune_auc", {})
    for name, per in summary["regimes"].items():
        for label, per_g in per.items():
            for G, c in per_g.items():
                grid, auc = grids.get(name, {}).get(f"{label}|{G}"), tune.get(name, {}).get(f"{label}|{G}")
                if grid and auc and len(grid) > 2 and c["lr"] == min(grid) and all(
                        a >= b for a, b in zip(auc, auc[1:])):
                    out.append(f"{name}/{label}/{G}: the tuning AUC falls as the lr rises over the whole grid "
                               f"({auc[0]:.4f} at lr {grid[0]:g} to {auc[-1]:.4f} at lr {grid[-1]:g}): no lr learns "
                               "better than barely moving, so the smallest lr wins; this configuration gives that "
                               "estimator no usable learning signal (more steps or answers per step would)")
    if edges:
        out.append(f"chosen lr at an edge of its grid (the best may lie beyond it): {', '.join(edges)}")
    if extended:
        out.append(f"lr grid too narrow, extended past an edge (`regimes.run_cell`): {'; '.join(extended)}")
    return out


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
    paired ratios over regimes and G, and their verdicts), and its learning-curve differences' verdicts; each
    count with its family's size and its Holm-corrected count."""
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
        noise = family_counts(family_of(summary, "gradient noise", {key}), summary.get("grad_delta", GRAD_DELTA))
        auc = family_counts(family_of(summary, "AUC", {key}), summary["negligible"])
        lines.append(
            f"- `{key}`: gradient noise ratio {ratios[lo_i]:.3f} ({items[lo_i][0]}, G={items[lo_i][1]}) to "
            f"{ratios[hi_i]:.3f} ({items[hi_i][0]}, G={items[hi_i][1]}); noise verdicts ({noise['n']}): "
            f"{_words(noise['classes'])}, {holm_words(noise)}; AUC verdicts ({auc['n']}): {_words(auc['classes'])}, "
            f"{holm_words(auc)}.")
    return "\n".join(lines)


def dapo_budget(summary: dict) -> str:
    """EBPO's gradient noise over DAPO's at an equal answer budget (`grad_noise_budget` = noise x answers a batch
    generates, geometric mean over seeds) in every regime and G, beside the per-training-batch ratio."""
    ebpo = [e for e in next(iter(summary["regimes"].values())) if parse_estimator(e).is_ebpo]
    dapo = [e for e in next(iter(summary["regimes"].values())) if parse_estimator(e).dynamic_sampling]
    if not ebpo or not dapo:
        return "(no EBPO or no DAPO in this run)"
    items = []
    for name, per in summary["regimes"].items():
        for G in summary["G"]:
            e, d = per[ebpo[0]].get(str(G), {}), per[dapo[0]].get(str(G), {})
            if e.get("grad_noise_budget") and d.get("grad_noise_budget"):
                items.append((e["grad_noise_budget"] / d["grad_noise_budget"], e["grad_noise"] / d["grad_noise"],
                              name, G))
    if not items:
        return "(no gradient measurement in this run)"
    lo, hi = min(items), max(items)
    per_batch = [x[1] for x in items]
    return (f"EBPO's gradient noise over DAPO's at an equal answer budget (noise x answers generated per batch, "
            f"geometric means over seeds, no interval): {lo[0]:.2f} ({lo[2]}, G={lo[3]}) to {hi[0]:.2f} ({hi[2]}, "
            f"G={hi[3]}), below 1 in {sum(x[0] < 1 for x in items)} of {len(items)} cells; per training batch the "
            f"same ratio is {min(per_batch):.2f} to {max(per_batch):.2f} (the noise verdicts above), because DAPO "
            "generates several batches to fill one.")


NEAREST = ("drgrpo", "grpo", "rloo")  # the group-mean baselines EBPO shrinks


def against(summary: dict) -> str:
    """The results that go against EBPO, as bullets computed from the summary: its learning verdicts against
    Dr.GRPO and James-Stein, against verl's REINFORCE++-baseline (the same batch whitening), against the
    group-mean baselines (where its gradient noise is lowest), and the differences this design can resolve."""
    ebpo = [e for e in next(iter(summary["regimes"].values())) if parse_estimator(e).is_ebpo]
    if not ebpo:
        return "- (no EBPO estimator in this run)"
    e = ebpo[0]
    present = next(iter(summary["regime_comparisons"].values()))
    pairs = [p for p in PAIRS if p in present]
    lines = []
    for kind in ("final success", "AUC"):
        c = family_counts(family_of(summary, kind, set(pairs)), summary["negligible"])
        lines.append(f"- {kind}, EBPO against Dr.GRPO and James-Stein ({c['n']} comparisons): {_words(c['classes'])}; "
                     f"{holm_words(c)}.")
    if f"{e}-rfpp_baseline" in present:
        c = family_counts(family_of(summary, "AUC", {f"{e}-rfpp_baseline"}), summary["negligible"])
        lines.append(f"- AUC against verl's `reinforce_plus_plus_baseline` (group-centred, then whitened over the "
                     f"batch as EBPO's default is; {c['n']} comparisons): {_words(c['classes'])}; {holm_words(c)}.")
    near = {f"{e}-{b}" for b in NEAREST} & set(present)
    if near:
        cells = [(name, G, c) for name, comps in summary["regime_comparisons"].items() for key in sorted(near)
                 for G, c in comps.get(key, {}).items()]
        better = [x for x in cells if any(classify(iv, summary["negligible"]).startswith("higher")
                                          for kind, iv in comparison_intervals(x[2], summary["seeds"]).items()
                                          if kind != "gradient noise")]
        g_min = str(min(summary["G"]))
        ratios = [c["noise_ratio"] for name, G, c in cells if G == g_min and c.get("noise_ratio") is not None]
        noise = (f", even at G={g_min}, where its gradient noise is {1 - max(ratios):.0%} to {1 - min(ratios):.0%} lower"
                 if ratios else "")
        lines.append(f"- against {', '.join(f'`{b}`' for b in NEAREST if f'{e}-{b}' in near)}: resolved higher (final "
                     f"success or AUC) in {len(better)} of {len(cells)} cells{noise}.")
    for name, comps in summary["regime_comparisons"].items():
        det = [comparison_intervals(c, summary["seeds"])["AUC"].detectable() for key in pairs + sorted(near)
               for c in comps.get(key, {}).values()]
        det = [d for d in det if math.isfinite(d)]
        if det:
            lines.append(f"- power, {name}: these seeds resolve, with 80% power, AUC differences of "
                         f"±{min(det):.2g} to ±{max(det):.2g} (median ±{float(np.median(det)):.2g}; EBPO against the pairs above); smaller ones are not "
                         "excluded.")
    return "\n".join(lines)


def _directions(classes: dict) -> str:
    """'2 lower (1 possibly negligible), 0 higher': resolved verdicts by direction, the rest left out."""
    out = []
    for word in ("lower", "higher"):
        strict, maybe = classes.get(word, 0), classes.get(f"{word} (possibly negligible)", 0)
        out.append(f"{strict + maybe} {word}" + (f" ({maybe} possibly negligible)" if maybe else ""))
    return ", ".join(out)


def readme_against(summary: dict) -> str:
    """The README's short form of `against` and `dapo_budget`: the counts that go against EBPO, with their family
    sizes and Holm counts, the design's power, and EBPO against DAPO at an equal answer budget."""
    e = next(x for x in next(iter(summary["regimes"].values())) if parse_estimator(x).is_ebpo)
    present = next(iter(summary["regime_comparisons"].values()))
    pairs = [p for p in PAIRS if p in present]
    fin = family_counts(family_of(summary, "final success", set(pairs)), summary["negligible"])
    parts = [f"final success vs Dr.GRPO/JS {_directions(fin['classes'])} of {fin['n']} "
             f"({fin['holm_resolved']} after Holm)"]
    if f"{e}-rfpp_baseline" in present:
        rf = family_counts(family_of(summary, "AUC", {f"{e}-rfpp_baseline"}), summary["negligible"])
        parts.append(f"AUC vs verl's REINFORCE++-baseline {_directions(rf['classes'])} of "
                     f"{rf['n']} ({rf['holm_resolved']} after Holm)")
    near = sorted({f"{e}-{b}" for b in NEAREST} & set(present))
    cells = [c for comps in summary["regime_comparisons"].values() for key in near for c in comps.get(key, {}).values()]
    better = sum(any(classify(iv, summary["negligible"]).startswith("higher")
                     for kind, iv in comparison_intervals(c, summary["seeds"]).items() if kind != "gradient noise")
                 for c in cells)
    parts.append(f"above Dr.GRPO, GRPO or RLOO in {better} of {len(cells)}")
    det = {}
    for name, comps in summary["regime_comparisons"].items():
        d = [comparison_intervals(c, summary["seeds"])["AUC"].detectable() for key in pairs + near
             for c in comps.get(key, {}).values()]
        det[name] = float(np.median([x for x in d if math.isfinite(x)]))
    text = ("Against EBPO: " + "; ".join(parts) + ". Median 80%-power AUC resolution: "
            + ", ".join(f"±{v:.2g} {k}" for k, v in det.items()) + ".")
    dapo = [x for x in next(iter(summary["regimes"].values())) if parse_estimator(x).dynamic_sampling]
    if dapo:
        r = [per[e][str(G)]["grad_noise_budget"] / per[dapo[0]][str(G)]["grad_noise_budget"]
             for per in summary["regimes"].values() for G in summary["G"]
             if per[e][str(G)].get("grad_noise_budget") and per[dapo[0]][str(G)].get("grad_noise_budget")]
        if r:
            text += (f" At an equal answer budget EBPO's noise is {min(r):.2f}-{max(r):.2f}x DAPO's "
                     f"({sum(x < 1 for x in r)} of {len(r)} cells below 1).")
    return text


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
        "dapo_budget": dapo_budget(summary),
        "against": against(summary),
    }


def readme_block(summary: dict) -> str:
    """The README's sentence: EBPO's gradient noise over Dr.GRPO's and over James-Stein's (paired by seed,
    geometric mean; range over regimes) at the smallest G and at the others, and the AUC verdicts of those pairs
    with their family size and Holm count."""
    Gs = [str(g) for g in summary["G"]]
    names = {"ebpo-drgrpo": "Dr.GRPO's", "ebpo-js": "James-Stein's"}
    parts = []
    for p in PAIRS:
        per = [(G, c["noise_ratio"]) for comps in summary["regime_comparisons"].values()
               for G, c in comps.get(p, {}).items() if c.get("noise_ratio") is not None]
        if not per:
            continue
        small = [r for G, r in per if G == Gs[0]]
        rest = [r for G, r in per if G != Gs[0]]
        text = f"over {names.get(p, p)} {min(small):.2f}-{max(small):.2f} at G={Gs[0]}"
        if rest:
            text += f", {min(rest):.2f}-{max(rest):.2f} at G={'/'.join(Gs[1:])}"
        parts.append(text)
    auc = family_counts(family_of(summary, "AUC", set(PAIRS)), summary["negligible"])
    return (f"EBPO's gradient noise {'; '.join(parts)}. AUC vs these two: "
            f"{_directions(auc['classes'])} of {auc['n']} ({auc['holm_resolved']} after Holm).")


# ---- the learning verdicts under several drift penalties (docs/results/simulate_drift) ----

STRICT = ("higher", "lower")


def setting_label(summary: dict) -> str:
    """How a sweep penalised drift, from its options: 'erosion 0.1', 'erosion 0 + weight decay 0.05', ..."""
    o = summary["options"]
    label = f"erosion {o.get('erosion', 0.0):g}"
    return label + (f" + weight decay {o['weight_decay']:g}" if o.get("weight_decay") else "")


def _verdict_table(summaries: dict) -> dict:
    """{(regime, pair, G, kind): {setting: (class, interval)}} over every comparison of every setting."""
    out: dict = {}
    for name, s in summaries.items():
        delta, gdelta = s["negligible"], s.get("grad_delta", GRAD_DELTA)
        for regime, comps in s["regime_comparisons"].items():
            for pair, per_g in comps.items():
                for G, c in per_g.items():
                    for kind, iv in comparison_intervals(c, s["seeds"]).items():
                        cls = classify(iv, gdelta if kind == "gradient noise" else delta)
                        out.setdefault((regime, pair, G, kind), {})[name] = (cls, iv)
    return out


def drift_blocks(summaries: dict) -> dict:
    """The blocks of the drift study: `summaries` maps a results name to its summary.json (each a default sweep
    that differs in its drift penalty only). "settings": one row per setting with its verdict counts and Holm
    counts per kind; "robust": the comparisons whose verdict is "higher"/"lower" (the whole interval beyond the
    threshold) in every setting, with their numbers, and how many verdicts of each kind are the same in every
    setting."""
    names = list(summaries)
    rows = ["| setting | results | AUC: verdicts | AUC: resolved after Holm | final success: verdicts | final "
            "success: resolved after Holm | gradient noise: verdicts |", "|---|---|---|---|---|---|---|"]
    for name, s in summaries.items():
        cells = []
        for kind in ("AUC", "final success", "gradient noise"):
            fam = family_of(s, kind)
            c = family_counts(fam, s.get("grad_delta", GRAD_DELTA) if kind == "gradient noise" else s["negligible"])
            cells.append(f"{c['n']}: {_words(c['classes'])}")
            if kind != "gradient noise":
                cells.append(f"{c['holm_resolved']} ({c['holm_higher']} higher, {c['holm_lower']} lower)")
        rows.append(f"| {setting_label(s)} | `{name}` | " + " | ".join(cells) + " |")
    table = _verdict_table(summaries)
    lines = []
    for kind in ("gradient noise", "AUC", "final success"):
        keys = [k for k in table if k[3] == kind and len(table[k]) == len(names)]
        same = [k for k in keys if len({cls for cls, _ in table[k].values()}) == 1]
        strict = [k for k in same if table[k][names[0]][0] in STRICT]
        ever = [k for k in keys if any(cls in STRICT for cls, _ in table[k].values())]
        classes = {}
        for k in same:
            classes[table[k][names[0]][0]] = classes.get(table[k][names[0]][0], 0) + 1
        equal = all(len({(iv.mean, iv.lo, iv.hi) for _, iv in table[k].values()}) == 1 for k in keys)
        lines.append(f"- {kind}: {len(same)} of {len(keys)} verdicts are the same under every setting "
                     f"({_words(classes) or 'none'})"
                     + ("; the numbers themselves are identical" if equal else "")
                     + f"; \"higher\"/\"lower\" under every setting: {len(strict)}, under at least one: {len(ever)}.")
        for k in strict:
            regime, pair, G, _ = k
            if kind == "gradient noise":
                if pair not in PAIRS:
                    continue
                iv = table[k][names[0]][1]
                lines.append(f"  - `{pair}` gradient noise, {regime}, G={G}: {table[k][names[0]][0]}, ratio "
                             f"{math.exp(iv.mean):.3f} [{math.exp(iv.lo):.3f}, {math.exp(iv.hi):.3f}].")
                continue
            nums = "; ".join(f"{setting_label(summaries[n])}: {signed(iv.mean)} [{signed(iv.lo)}, {signed(iv.hi)}]"
                             for n, (_, iv) in table[k].items())
            lines.append(f"  - `{pair}` {kind}, {regime}, G={G}: {table[k][names[0]][0]} under every setting ({nums}).")
    counts = {}
    for kind in ("gradient noise", "AUC", "final success"):
        keys = [k for k in table if k[3] == kind and len(table[k]) == len(names)]
        counts[kind] = (len(keys), sum(len({cls for cls, _ in table[k].values()}) == 1 for k in keys),
                        sum(all(cls == next(iter(table[k].values()))[0] and cls in STRICT
                                for cls, _ in table[k].values()) for k in keys),
                        sum(any(cls in STRICT for cls, _ in table[k].values()) for k in keys))
    n, same, _, _ = counts["gradient noise"]
    readme = (f"Under {len(names)} [drift penalties](docs/simulator.md#erosion), {same} of {n} gradient-noise verdicts "
              "hold; learning verdicts "
              "do not (\"higher\"/\"lower\" in all / some: " + "; ".join(
                  f"{kind} {c[2]} / {c[3]} of {c[0]}" for kind, c in counts.items() if kind != "gradient noise")
              + ").")
    return {"settings": "\n".join(rows), "robust": "\n".join(lines), "readme": readme}
