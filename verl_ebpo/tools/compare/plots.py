"""Curves over seeds, shared by `verl-ebpo compare` and `verl-ebpo demo`: every seed faint, the mean over seeds
bold with its 95% t band (`stats.mean_ci_rows`), against training steps or against answers generated."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from verl_ebpo.tools.stats import mean_ci_rows

COLORS = {"grpo": "tab:blue", "drgrpo": "tab:green", "dapo": "tab:purple", "ebpo": "tab:orange"}
NAMES = {"grpo": "GRPO", "drgrpo": "Dr.GRPO", "dapo": "DAPO", "ebpo": "EBPO"}
POINTS = 120  # points of a curve against answers generated
PLOTS = ("training_reward.png", "validation_accuracy.png")  # what `write_plots` may draw


def smooth(values: np.ndarray, window: int = 5) -> np.ndarray:
    """Trailing moving average over up to `window` values (shape kept)."""
    values = np.asarray(values, dtype=np.float64)
    c = np.cumsum(np.insert(values, 0, 0.0))
    idx = np.arange(1, len(values) + 1)
    lo = np.maximum(idx - window, 0)
    return (c[idx] - c[lo]) / (idx - lo)


def band(curves) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean over seeds (curves: (seeds, points)) and its 95% t band (`stats.mean_ci_rows`; NaN band with one
    seed, and a gap where a seed's value is unknown)."""
    return mean_ci_rows(np.asarray(curves).T, nonfinite="nan")


def seed_curves(xs: Sequence[np.ndarray], ys: Sequence[np.ndarray], by: str) -> tuple[np.ndarray, np.ndarray]:
    """Per-seed curves on one x grid: by="step": the steps every seed logged (xs: each seed's steps);
    by="answers": `POINTS` points from the smallest first x to the smallest last x (xs: cumulative answers,
    each seed's curve interpolated). Returns (x (points,), curves (seeds, points))."""
    if by == "step":
        common = xs[0]
        for x in xs[1:]:
            common = np.intersect1d(common, x)
        return common, np.stack([y[np.searchsorted(x, common)] for x, y in zip(xs, ys)])
    grid = np.linspace(min(float(x[0]) for x in xs), min(float(x[-1]) for x in xs), POINTS)
    return grid, np.stack([np.interp(grid, x, y) for x, y in zip(xs, ys)])


def draw(ax, x: np.ndarray, curves: np.ndarray, color, label: str) -> None:
    for curve in curves:
        ax.plot(x, curve, color=color, alpha=0.25, linewidth=0.8)
    mean, lo, hi = band(curves)
    ax.plot(x, mean, color=color, linewidth=2.2, label=label)
    ax.fill_between(x, lo, hi, color=color, alpha=0.15, linewidth=0)


def figure(panels: int):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, panels, figsize=(5.4 * panels, 4.8), squeeze=False)
    return plt, fig, list(axes[0])


def save(plt, fig, path: str | Path, title: str) -> None:
    from verl_ebpo.files import atomic_output

    fig.suptitle(title)
    fig.tight_layout()
    with atomic_output(path) as tmp:
        fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)


def plot_metric(curves: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]], path: str | Path, ylabel: str,
                title: str, window: int = 5) -> None:
    """One metric against steps and against answers generated. curves: algo -> per seed (steps, cumulative
    answers at those steps or None, values); values smoothed over `window` logged points."""
    plt, fig, axes = figure(2)
    for algo, seeds in curves.items():
        color, name = COLORS.get(algo), NAMES.get(algo, algo)
        label = f"{name} ({len(seeds)} seed{'s' if len(seeds) > 1 else ''})"
        ys = [smooth(v, window) for _, _, v in seeds]
        x, c = seed_curves([s for s, _, _ in seeds], ys, "step")
        if x.size:
            draw(axes[0], x, c, color, label)
        if all(a is not None for _, a, _ in seeds):
            x, c = seed_curves([a for _, a, _ in seeds], ys, "answers")
            draw(axes[1], x, c, color, label)
    if not axes[1].lines:
        axes[1].text(0.5, 0.5, "answers generated unknown:\npass --batch-size and --group-size", ha="center",
                     va="center", transform=axes[1].transAxes)
    axes[0].set_xlabel("training step")
    axes[1].set_xlabel("answers generated (cumulative)")
    for ax in axes:
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    if axes[0].get_legend_handles_labels()[0]:  # no curve: seeds without a common step (the report says so)
        axes[0].legend(loc="best")
    save(plt, fig, path, title)


def write_plots(runs: dict, out: Path, progress: bool = False) -> list[str]:
    """`verl-ebpo compare`'s curves (`PLOTS`): training reward, the mean reward of all answers generated
    (`Run.reward_all`: verl's `critic/score/mean`, for DAPO with its dropped groups' rewards; a DAPO algorithm
    without them is left out), and validation accuracy (the mean of `val-core/<source>/acc/mean@1`), each when
    every run of an algorithm has it. Returns the files written; `progress`: a tqdm bar on stderr after 2 s."""
    import sys

    from tqdm import tqdm

    from verl_ebpo.tools.verl_logs import _VAL_ACC

    written = []
    reward: dict = {}
    accuracy: dict = {}
    for algo, rs in runs.items():
        if all(r.reward_all is not None for r in rs):
            reward[algo] = [(r.steps, r.cum_answers if r.answers is not None else None, r.reward_all) for r in rs]
        per_run = []
        for r in rs:
            keys = [k for k in r.val if _VAL_ACC.match(k)]
            steps = sorted(set.intersection(*(set(r.val[k]) for k in keys))) if keys else []
            if not steps:
                break
            values = np.asarray([np.mean([r.val[k][s] for k in keys]) for s in steps])
            cum = None
            if r.answers is not None:  # answers generated before the validation at step s (0 at step 0)
                cum = np.interp(steps, np.concatenate([[0], r.steps]), np.concatenate([[0.0], r.cum_answers]))
            per_run.append((np.asarray(steps), cum, values))
        else:
            accuracy[algo] = per_run
    jobs = [job for job in (
        (reward, PLOTS[0], "training reward: all answers generated", "Training reward (all answers generated): "
         "mean over seeds with 95% band (faint: each seed)", 5),
        (accuracy, PLOTS[1], "validation accuracy (val-core acc/mean@1)",
         "Validation accuracy: mean over seeds with 95% band (faint: each seed)", 1)) if job[0]]
    for curves, name, ylabel, title, window in tqdm(jobs, desc="drawing plots", unit="plot", delay=2.0,
                                                    disable=not progress, file=sys.stderr):
        plot_metric(curves, Path(out) / name, ylabel, title, window=window)
        written.append(name)
    return written
