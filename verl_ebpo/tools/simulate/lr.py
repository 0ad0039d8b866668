"""The simulator's study: each estimator's learning-rate envelope, and EBPO against each baseline at each one's own
best lr (issue 49).

For every regime of `REGIMES` x G x estimator, every lr of the grid runs over the tuning seeds and the reporting
seeds at once (rows of one batched `engine.run_one`). The envelope is the reporting seeds' AUC (mean success over
the run) and final success per lr. Each estimator's best lr is the grid value with the highest mean AUC on the
*tuning* seeds (ties: the smaller lr), chosen before the reporting seeds are read; EBPO (running prior) is then
compared with each baseline, each at its own best lr, paired by reporting seed (same task, same prompt stream), with
a 95% interval per comparison and Holm's correction over the family (per metric). The grid is fixed in advance, the
same for every estimator (the 1-3 sequence over four decades); a best lr at a grid edge is flagged (`edge`).
With `grad_draws` > 0 it also measures each estimator's gradient noise at the initial policy (`gradient.measure`,
reporting seeds): the mechanism through which a lower-noise advantage can learn faster.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time

import numpy as np

from verl_ebpo.tools.simulate.options import EBPO, SimOptions, words

# the regimes' difficulty laws, p0 ~ Beta(A, B): `hard` (initial success about 0.09); `very_hard` about 0.05 (most
# G = 2 groups fail)
REGIMES = {"hard": (0.3, 3.0), "very_hard": (0.2, 3.8)}
METRICS = ("auc", "final")
GRAD_DELTA = 0.05  # |log noise ratio| below it: practically equal (5%)
FILES = ("summary.json", "results.md", "simulate_lr.png")


def command_of(options: SimOptions) -> str:
    """The command that makes `options`: `verl-ebpo simulate` and every option that differs from the default."""
    line, default = ["verl-ebpo", "simulate"], SimOptions()
    for f in dataclasses.fields(options):
        value = getattr(options, f.name)
        if value != getattr(default, f.name):
            line += ["--" + f.name.replace("_", "-"), *words(value)]
    return " ".join(line)


def auc(curve: np.ndarray) -> np.ndarray:
    """(S,) area under success vs answers generated, divided by the budget (trapezoids over the step grid):
    the mean success over the run. curve: (S, steps + 1)."""
    return ((curve[:, 1:] + curve[:, :-1]) / 2).mean(axis=1)


def run_cell(task, label: str, G: int, options) -> dict:
    """One (regime, estimator, G): every lr x (tuning + reporting seeds) in one batched run. Returns
    {"auc": (L, S_tune + S_report), "final": (L, S_tune + S_report)}, rows in grid order, tuning seeds first."""
    from verl_ebpo.tools.simulate.engine import run_one
    from verl_ebpo.tools.simulate.estimators import parse_estimator

    grid, per = options.lr_grid, options.tune_seeds + options.seeds
    seeds = [s for _ in grid for s in (*options.tune_seed_list, *options.seed_list)]
    run = run_one(task, parse_estimator(label), G, options, seeds=seeds, lrs=np.repeat(grid, per))
    return {"auc": auc(run.curve).reshape(len(grid), per), "final": run.final.reshape(len(grid), per)}


def run_study(options, progress=None) -> dict:
    """{regime: {G: {label: run_cell(...) + {"noise": (S_report,)} with grad_draws}}} over REGIMES x G x estimators."""
    from verl_ebpo.tools.simulate.engine import one_torch_thread
    from verl_ebpo.tools.simulate.estimators import parse_estimator
    from verl_ebpo.tools.simulate.gradient import measure
    from verl_ebpo.tools.simulate.task import make_task

    o, out = options, {}
    with one_torch_thread():
        for name, beta in REGIMES.items():
            task = make_task([s for _ in o.lr_grid for s in (*o.tune_seed_list, *o.seed_list)], o.prompts, beta,
                             o.features, o.erosion)
            report = make_task(o.seed_list, o.prompts, beta, o.features, o.erosion)
            for G in o.G:
                for label in o.estimators:
                    cell = out.setdefault(name, {}).setdefault(G, {})[label] = run_cell(task, label, G, o)
                    if o.grad_draws:
                        cell["noise"] = measure(report, parse_estimator(label), G, o).noise
                    if progress is not None:
                        progress(name, G, label)
    return out


def best_index(tune_auc: np.ndarray) -> int:
    """The grid index with the highest mean tuning AUC (ties: the smaller lr). tune_auc: (L, S_tune)."""
    means = tune_auc.mean(axis=1)
    return int(np.flatnonzero(means == means.max())[0])


def _exp(xs: list) -> list:
    return [None if x is None else float(np.exp(x)) for x in xs]


def summarize(results: dict, options, seconds: float, command: str) -> dict:
    """summary.json: the envelope (reporting seeds), each estimator's best lr (tuning seeds), EBPO minus each
    baseline at each one's best lr (reporting seeds, paired) with Holm's correction per metric, and the gradient
    noise (geometric mean over seeds; EBPO's over each baseline's, paired by seed on the log scale)."""
    from verl_ebpo.tools.simulate.task import SCORE_NOISE, TRANSFER, make_task
    from verl_ebpo.tools.stats import classify, holm, mean_ci, paired_diff_ci

    nt, grid = options.tune_seeds, options.lr_grid
    envelope, best, rows, init = {}, {}, [], {}
    for name, per_g in results.items():
        for G, per in per_g.items():
            for label, r in per.items():
                envelope.setdefault(name, {}).setdefault(str(G), {})[label] = {f"{lr:g}": {
                    "auc_mean": float(ci.mean), "auc_ci95": ci.as_list(), "final_mean": float(r["final"][i, nt:].mean()),
                    "tune_auc_mean": float(r["auc"][i, :nt].mean())} for i, lr in enumerate(grid)
                    for ci in [mean_ci(r["auc"][i, nt:])]}
                b = best_index(r["auc"][:, :nt])
                best.setdefault(name, {}).setdefault(str(G), {})[label] = {"lr": grid[b], "edge": b in (0, len(grid) - 1)}
            e = per[EBPO]
            be = best_index(e["auc"][:, :nt])
            for label, r in per.items():
                if label == EBPO:
                    continue
                bb = best_index(r["auc"][:, :nt])
                for metric in METRICS:
                    d = paired_diff_ci(e[metric][be, nt:], r[metric][bb, nt:])
                    rows.append({"regime": name, "G": G, "estimator": EBPO, "baseline": label, "metric": metric,
                                 "lr": grid[be], "baseline_lr": grid[bb], "diff": float(d.mean), "ci95": d.as_list(),
                                 "p": d.p_value(), "verdict": classify(d, options.negligible)})
    for metric in METRICS:
        fam = [r for r in rows if r["metric"] == metric]
        for r, rejected in zip(fam, holm([r["p"] for r in fam])):
            r["holm"] = bool(rejected)
    for name, beta in REGIMES.items():
        p = 1.0 / (1.0 + np.exp(-make_task(options.seed_list, options.prompts, beta, options.features).z0.numpy()))
        init[name] = {"beta": list(beta), "transfer": list(TRANSFER), "score_noise": SCORE_NOISE, "initial": {
            "success": float(p.mean()), "all_fail_share": {str(G): float(((1 - p) ** G).mean()) for G in options.G}}}
    return {"study": "lr", "command": command, "seconds": round(seconds, 1), "grid": list(grid),
            "estimators": list(options.estimators), "G": list(options.G), "seeds": options.seeds,
            "tune_seeds": options.tune_seeds, "negligible": options.negligible,
            "regimes": init,
            "best_lr": best, "envelope": envelope, "at_best_lr": rows,
            **({"gradient": gradient_summary(results), "grad_draws": options.grad_draws} if options.grad_draws else {})}


def gradient_summary(results: dict) -> dict:
    """{regime: {G: {label: {"noise", "noise_ci95", "ebpo_ratio" (baselines)}}}} from the per-seed noise of
    `run_study`'s cells: geometric means over seeds; EBPO's over a baseline's paired by seed on the log scale.
    A seed whose draws all gave a zero gradient has an infinite noise: its cell's noise is None (too few draws)."""
    from verl_ebpo.tools.stats import classify, mean_ci, paired_diff_ci

    out: dict = {}
    for name, per_g in results.items():
        for G, per in per_g.items():
            for label, r in per.items():
                if not np.isfinite(r["noise"]).all():
                    out.setdefault(name, {}).setdefault(str(G), {})[label] = {"noise": None}
                    continue
                n = mean_ci(np.log(r["noise"]))
                g = {"noise": float(np.exp(n.mean)), "noise_ci95": _exp(n.as_list())}
                if label != EBPO and np.isfinite(per[EBPO]["noise"]).all():
                    d = paired_diff_ci(np.log(per[EBPO]["noise"]), np.log(r["noise"]))
                    g["ebpo_ratio"] = {"ratio": float(np.exp(d.mean)), "ci95": _exp(d.as_list()),
                                       "verdict": classify(d, GRAD_DELTA)}
                out.setdefault(name, {}).setdefault(str(G), {})[label] = g
    return out


def _ci(d, ci) -> str:
    return f"{d:+.3f} [{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci[0] is not None else f"{d:+.3f}"


def best_table(summary: dict) -> str:
    """Each estimator's best lr (tuning seeds) per regime and G, `*` at a grid edge."""
    head = "| regime | G | " + " | ".join(summary["estimators"]) + " |"
    rows = [head, "|---|---:|" + "---:|" * len(summary["estimators"])]
    for name, per_g in summary["best_lr"].items():
        for G, per in per_g.items():
            rows.append(f"| {name} | {G} | " + " | ".join(
                f"{per[e]['lr']:g}" + ("*" if per[e]["edge"] else "") for e in summary["estimators"]) + " |")
    return "\n".join(rows)


def comparison_table(summary: dict) -> str:
    """EBPO minus each baseline at each one's own best lr (reporting seeds), AUC and final success."""
    rows = ["| regime | G | baseline | lr (EBPO / baseline) | AUC diff [95% CI] | verdict; Holm | final diff [95% CI] "
            "| verdict; Holm |", "|---|---:|---|---|---:|---|---:|---|"]
    by = {}
    for r in summary["at_best_lr"]:
        by.setdefault((r["regime"], r["G"], r["baseline"]), {})[r["metric"]] = r
    for (name, G, base), m in by.items():
        a, f = m["auc"], m["final"]
        rows.append(f"| {name} | {G} | {base} | {a['lr']:g} / {a['baseline_lr']:g} | {_ci(a['diff'], a['ci95'])} | "
                    f"{a['verdict']}; {'resolved' if a['holm'] else 'not resolved'} | {_ci(f['diff'], f['ci95'])} | "
                    f"{f['verdict']}; {'resolved' if f['holm'] else 'not resolved'} |")
    return "\n".join(rows)


def gradient_table(summary: dict) -> str:
    """Per regime and G, each estimator's gradient noise tr Cov(g) / |E g|^2 at the initial policy (geometric mean
    over seeds) and, for a baseline, EBPO's noise over its own (paired by seed, 95% CI)."""
    labels = summary["estimators"]
    rows = ["| regime | G | " + " | ".join(labels) + " |", "|---|---:|" + "---|" * len(labels)]
    for name, per_g in summary.get("gradient", {}).items():
        for G, per in per_g.items():
            cells = []
            for label in labels:
                c = per[label]
                r = c.get("ebpo_ratio")
                cells.append("n/a" if c["noise"] is None else f"{c['noise']:.3g}" + ("" if r is None else f" (EBPO x{r['ratio']:.3f}"
                                                     + ("" if r["ci95"][0] is None else
                                                        f" [{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}]") + ")"))
            rows.append(f"| {name} | {G} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def findings(summary: dict) -> list[str]:
    """Sentences computed from the summary: where EBPO's AUC at its best lr is resolved above / below each baseline's
    after Holm, and where the best lrs lie."""
    out = []
    auc_rows = [r for r in summary["at_best_lr"] if r["metric"] == "auc"]
    for sign, word in ((1, "higher"), (-1, "lower")):
        hits = [r for r in auc_rows if r["holm"] and sign * r["diff"] > 0]
        out.append(f"EBPO's AUC at its own best lr, resolved {word} than a baseline's at the baseline's best lr after "
                   f"Holm ({len(auc_rows)} comparisons): " + (", ".join(
                       f"{r['baseline']} ({r['regime']}, G={r['G']}, {r['diff']:+.3f})" for r in hits) or "none") + ".")
    edges = [f"{n}/G={G}/{e}" for n, per_g in summary["best_lr"].items() for G, per in per_g.items()
             for e, c in per.items() if c["edge"]]
    out.append("Best lr at a grid edge (the curve may not turn down there): " + (", ".join(edges) or "none") + ".")
    return out


def noise_words(summary: dict, baseline: str = "grpo") -> str:
    """'0.65-0.68 at G = 2, ...': EBPO's gradient noise over `baseline`'s per G, the range over regimes."""
    parts = []
    for G in map(str, summary["G"]):
        r = [per[G][baseline]["ebpo_ratio"]["ratio"] for per in summary.get("gradient", {}).values()
             if "ebpo_ratio" in per.get(G, {}).get(baseline, {})]
        if r:
            parts.append((f"{min(r):.2f}" if max(r) - min(r) < 0.005 else f"{min(r):.2f}-{max(r):.2f}") + f" at G = {G}")
    return ", ".join(parts)


def readme_block(summary: dict) -> str:
    """The README's "What to expect" block (at most 6 lines), from this study's summary."""
    auc_rows = [r for r in summary["at_best_lr"] if r["metric"] == "auc"]
    Gs = sorted({r["G"] for r in auc_rows})
    up = sorted({r["G"] for r in auc_rows if r["holm"] and r["diff"] > 0})
    down = sorted({r["G"] for r in auc_rows if r["holm"] and r["diff"] < 0})
    lo, hi = min(r["diff"] for r in auc_rows), max(r["diff"] for r in auc_rows)
    vs_grpo = [r for r in auc_rows if r["baseline"] == "grpo"]
    same = sum(r["lr"] == r["baseline_lr"] for r in vs_grpo)
    lower = sum(r["lr"] < r["baseline_lr"] for r in vs_grpo)
    gain = (f"resolved gains (Holm) at G = {', '.join(map(str, up))}" if up else "no resolved gain (Holm) at any G")
    losers = sorted({r["baseline"] for r in auc_rows if r["holm"] and r["diff"] < 0})
    loss = (f", resolved losses against {', '.join(losers)} (at G = {', '.join(map(str, down))})" if down else "")
    if up and not down:
        rule = "try EBPO at small G, and re-tune the lr when switching from GRPO"
    elif not up:
        rule = "expect no learning-speed gain over a tuned baseline; tune the lr of whichever you use"
    else:
        rule = "the sign depends on the setting: tune the lr and compare on your own task"
    noise = noise_words(summary)
    return "\n".join([
        "- **Paper** (Qwen3-8B, G = 4, Table 1): average Pass@1 EBPO-topic 64.39, EBPO-naive 60.00, GRPO 58.72, with "
        "every method at one lr (1e-6), which cannot tell a better method from a better-suited lr; EBPO's checkpoint "
        "was picked afterwards from saves every 10 steps while the baselines report their last, and EBPO-naive's "
        "AIME is 10 points below the authors' own log ([the numbers](recipes/README.md#the-numbers-so-far)).",
        f"- **Simulator, each method at its own best lr** ({summary['seeds']} seeds, lr tuned on "
        f"{summary['tune_seeds']} other seeds, regimes {', '.join(summary['regimes'])}, G = "
        f"{', '.join(map(str, Gs))}): EBPO minus each baseline's AUC {lo:+.3f} to {hi:+.3f}; {gain}{loss} of "
        f"{len(auc_rows)} comparisons.",
        f"- EBPO's best lr equals GRPO's in {same} of {len(vs_grpo)} cells and is lower in {lower} "
        "([envelope](docs/simulator.md#learning-rate))"
        + (f"; its gradient noise over GRPO's at the initial policy: {noise} ([gradient](docs/simulator.md#gradient))"
           if noise else "") + ".",
        f"- **Rule**: {rule}.",
    ])


def run_sentence(summary: dict) -> str:
    init = "; ".join(f"`{n}` initial success {r['initial']['success']:.3f}, all-fail share at G=2 "
                     f"{r['initial']['all_fail_share']['2']:.2f}" for n, r in summary["regimes"].items()
                     if "2" in r["initial"]["all_fail_share"])
    grad = (f" Gradient noise from {summary['grad_draws']} batches per reporting seed." if "gradient" in summary else "")
    return (f"`{summary['command']}` ({summary['seconds']:.0f} s on the 2-core development machine, shared). Grid "
            f"{', '.join(f'{x:g}' for x in summary['grid'])} (Adam), the same for every estimator; best lr: highest "
            f"mean AUC on {summary['tune_seeds']} tuning seeds (ties: the smaller lr); comparisons on "
            f"{summary['seeds']} other seeds, paired. {init}.{grad}")


def doc_blocks(summary: dict) -> dict:
    """The generated blocks (`<!-- results:simulate_lr:NAME -->` in docs/simulator.md and the README)."""
    return {"run": run_sentence(summary), "best": best_table(summary), "comparisons": comparison_table(summary),
            "gradient": gradient_table(summary), "findings": "\n".join(f"- {s}" for s in findings(summary)),
            "readme": readme_block(summary)}


def results_markdown(summary: dict) -> str:
    b = doc_blocks(summary)
    return (f"# Learning-rate study\n\n{b['run']}\n\n## Best lr\n\n{b['best']}\n\n## EBPO minus each baseline, "
            f"each at its own best lr\n\n{b['comparisons']}\n\n## Gradient noise at the initial policy\n\n"
            f"{b['gradient']}\n\n## Findings\n\n{b['findings']}\n")


def figure(summary: dict, path: str) -> None:
    """AUC (reporting seeds, 95% band) against lr, one panel per regime x G; a dot at each estimator's best lr."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from verl_ebpo.tools.files import atomic_output

    names, Gs = list(summary["envelope"]), [str(g) for g in summary["G"]]
    fig, axes = plt.subplots(len(names), len(Gs), figsize=(4 * len(Gs), 3.2 * len(names)), squeeze=False)
    for i, name in enumerate(names):
        for j, G in enumerate(Gs):
            ax = axes[i][j]
            for k, (label, cell) in enumerate(summary["envelope"][name][G].items()):
                lrs = [float(k) for k in cell]
                m = np.array([c["auc_mean"] for c in cell.values()])
                lo = np.array([c["auc_ci95"][0] for c in cell.values()], dtype=float)
                hi = np.array([c["auc_ci95"][1] for c in cell.values()], dtype=float)
                line, = ax.plot(lrs, m, marker=".", label=label, lw=2.2 if label == EBPO else 1.2,
                                ls=("-", "--", ":", "-.")[k % 4])
                ax.fill_between(lrs, lo, hi, color=line.get_color(), alpha=0.15)
                b = summary["best_lr"][name][G][label]["lr"]
                ax.plot([b], [cell[f"{b:g}"]["auc_mean"]], "o", color=line.get_color(), ms=7, mfc="none")
            ax.set_xscale("log")
            ax.set_title(f"{name}, G={G}")
            ax.set_xlabel("learning rate (Adam)")
            ax.set_ylabel("AUC (mean success over the run)")
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle("AUC against lr (reporting seeds, 95% bands; circles: best lr on the tuning seeds)")
    fig.tight_layout()
    with atomic_output(path) as tmp:
        fig.savefig(tmp, format="png", dpi=90)
    plt.close(fig)


def main(given: dict, out: str, figure_too: bool = True, quiet: bool = False) -> int:
    """`verl-ebpo simulate`: exit 0, or 2 with one line for bad options or an unusable --out, 1 when writing fails."""
    from tqdm import tqdm

    from verl_ebpo.tools.files import OutputPathError, atomic_write_text, check_output_path
    from verl_ebpo.tools.provenance import environment

    try:
        options = SimOptions.from_mapping(given)
        if os.path.exists(out) and not os.path.isdir(out):
            raise ValueError(f"--out {out} exists and is not a folder; give a folder path")
        for name in FILES:
            check_output_path(os.path.join(out, name))
    except ValueError as e:  # OutputPathError included
        print(f"verl-ebpo simulate: error: {e}", file=sys.stderr)
        return 2
    total = len(REGIMES) * len(options.G) * len(options.estimators)
    bar = tqdm(total=total, desc="simulate", unit="cell", file=sys.stderr, disable=quiet, mininterval=0.5)
    t0 = time.perf_counter()
    try:
        results = run_study(options, progress=lambda *_: bar.update(1))
    finally:
        bar.close()
    summary = summarize(results, options, time.perf_counter() - t0, command_of(options))
    summary["environment"] = environment()
    try:
        os.makedirs(out, exist_ok=True)
        atomic_write_text(os.path.join(out, "summary.json"), json.dumps(summary, indent=1) + "\n")
        atomic_write_text(os.path.join(out, "results.md"), results_markdown(summary))
        if figure_too:
            figure(summary, os.path.join(out, "simulate_lr.png"))
    except (OutputPathError, OSError) as e:
        print(f"verl-ebpo simulate: error: cannot write to {out}: {e}", file=sys.stderr)
        return 1
    if not quiet:
        print(results_markdown(summary))
    print(f"{summary['seconds']:.1f} s; wrote {out}")
    return 0


# ---- the same question on verl's real trainer: `verl-ebpo demo` runs, one folder per lr ----

DEMO_ALGOS = ("grpo", "ebpo")
ENTROPY = "actor/entropy"
TAIL = 5  # "final": the mean over the last TAIL logged steps


def demo_summary(root: str, command: str = "") -> dict:
    """From `verl-ebpo demo --out ROOT/lr_<lr>` runs (verl's own metrics.jsonl per algo and seed): per lr and
    algorithm the mean reward over the run (`critic/score/mean`: the answers trained on), the final reward and the
    policy entropy (`actor/entropy`, mean of the last TAIL steps), and EBPO minus GRPO paired by seed."""
    from pathlib import Path

    from verl_ebpo.tools import verl_logs
    from verl_ebpo.tools.stats import classify, mean_ci, paired_diff_ci

    out: dict = {"study": "demo_lr", "command": command, "tail_steps": TAIL, "lrs": {}}
    for folder in sorted(Path(root).glob("lr_*"), key=lambda p: float(p.name[3:])):
        per: dict = {}
        for algo in DEMO_ALGOS:
            for run in sorted(p.parent for p in (folder / "runs" / algo).glob("seed*/metrics.jsonl")):
                m = verl_logs.read_metrics(run / "metrics.jsonl")
                steps = sorted(s for s in m if s >= 1 and verl_logs.SCORE in m[s])
                if not steps:
                    continue
                reward = np.array([m[s][verl_logs.SCORE] for s in steps], dtype=float)
                ent = np.array([m[s].get(ENTROPY, np.nan) for s in steps], dtype=float)
                per.setdefault(algo, {})[run.name] = {
                    "steps": len(steps), "reward_mean": float(reward.mean()),
                    "reward_final": float(reward[-TAIL:].mean()), "entropy_first": float(ent[0]),
                    "entropy_final": float(np.nanmean(ent[-TAIL:]))}
        full = max((r["steps"] for runs in per.values() for r in runs.values()), default=0)
        done = {a: {k for k, r in runs.items() if r["steps"] == full} for a, runs in per.items()}  # stopped runs out
        cell: dict = {"runs": per, "steps": full}
        seeds = sorted(done.get("grpo", set()) & done.get("ebpo", set()))
        for key in ("reward_mean", "reward_final", "entropy_final"):
            for algo in DEMO_ALGOS:
                vals = [per[algo][s][key] for s in seeds]
                if vals:
                    ci = mean_ci(vals)
                    cell.setdefault(algo, {})[key] = {"mean": float(ci.mean), "ci95": ci.as_list()}
            if seeds:
                d = paired_diff_ci([per["ebpo"][s][key] for s in seeds], [per["grpo"][s][key] for s in seeds])
                cell.setdefault("ebpo_minus_grpo", {})[key] = {"diff": float(d.mean), "ci95": d.as_list(),
                                                               "verdict": classify(d)}
        cell["seeds"] = len(seeds)
        out["lrs"][folder.name[3:]] = cell
    return out


def demo_line(demo: dict) -> str:
    """One README line from `demo_summary`: EBPO minus GRPO in reward and final entropy per lr, verl's trainer."""
    parts = []
    for lr_, c in demo["lrs"].items():
        d = c.get("ebpo_minus_grpo", {})
        if "reward_mean" in d and "entropy_final" in d:
            parts.append(f"lr {lr_} ({c['seeds']} seed{'s' if c['seeds'] > 1 else ''}): reward "
                         f"{d['reward_mean']['diff']:+.3f} ({d['reward_mean']['verdict']}), "
                         f"entropy {d['entropy_final']['diff']:+.3f} ({d['entropy_final']['verdict']})")
    return ("- **verl's trainer** (`verl-ebpo demo`, tiny model, G = 2), EBPO minus GRPO, reward over the run and "
            "final `actor/entropy`: "
            + ("; ".join(parts) or "no paired runs") + " ([demo_lr](docs/results/demo_lr/results.md)).")


def demo_markdown(summary: dict) -> str:
    rows = ["| lr | seeds | algo | reward, mean over run | reward, last steps | entropy, last steps |",
            "|---|---:|---|---:|---:|---:|"]
    for lr_, c in summary["lrs"].items():
        for algo in (*DEMO_ALGOS, "ebpo_minus_grpo"):
            if algo not in c:
                continue
            vals = []
            for key in ("reward_mean", "reward_final", "entropy_final"):
                v = c[algo].get(key)
                if v is None:
                    vals.append("n/a")
                elif algo == "ebpo_minus_grpo":
                    vals.append(f"{_ci(v['diff'], v['ci95'])} ({v['verdict']})")
                else:
                    lo, hi = v["ci95"]
                    vals.append(f"{v['mean']:.3f}" + ("" if lo is None else f" [{lo:.3f}, {hi:.3f}]"))
            rows.append(f"| {lr_} | {c['seeds']} | {algo} | " + " | ".join(vals) + " |")
    return (f"# GRPO and EBPO at G = 2 over learning rates, verl's real trainer (`verl-ebpo demo`)\n\n"
            f"{summary['command']}\n\n" + "\n".join(rows) + "\n")


if __name__ == "__main__":  # python -m verl_ebpo.tools.simulate.lr demo ROOT OUT "COMMAND"
    from verl_ebpo.tools.files import atomic_write_text

    _, _what, _root, _out, *_cmd = sys.argv
    _s = demo_summary(_root, " ".join(_cmd))
    os.makedirs(_out, exist_ok=True)
    atomic_write_text(os.path.join(_out, "summary.json"), json.dumps(_s, indent=1) + "\n")
    atomic_write_text(os.path.join(_out, "results.md"), demo_markdown(_s))
    print(demo_markdown(_s))
