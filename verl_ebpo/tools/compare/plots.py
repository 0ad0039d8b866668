"""Curves over seeds, shared by `verl-ebpo compare` and `verl-ebpo demo`: every seed a faint line in its algorithm's
colour, the mean over seeds bold with its 95% t band (`stats.mean_ci_rows`), against training steps or against
answers generated.

What a figure says on itself (its caption, under the panels): the smoothing (a trailing moving average over
`window` logged points, or none), the seeds per algorithm (the legend; with one seed there is no band and the
caption says so), and the range the band is clipped to (`value_range`: [0, 1] for accuracies, shares and a reward
whose every logged value is in [0, 1]; a band is an interval for the mean, which cannot leave that range). Curves
of few points (validation) get markers. Against answers generated each seed is drawn to its own end and the mean
and band where every seed has reached (the caption says so). PNG at `DPI`, or `pdf` / `svg`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from verl_ebpo.tools.stats import mean_ci_rows

COLORS = {"grpo": "tab:blue", "drgrpo": "tab:green", "dapo": "tab:purple", "ebpo": "tab:orange"}
PALETTE = ("tab:red", "tab:brown", "tab:pink", "tab:olive", "tab:cyan", "tab:gray", "black", "gold")
NAMES = {"grpo": "GRPO", "drgrpo": "Dr.GRPO", "dapo": "DAPO", "ebpo": "EBPO"}
POINTS = 120  # points of a curve against answers generated
SPARSE = 15  # a curve of fewer points is drawn with markers
DPI = 150
VIEWS = ("training_reward", "validation_accuracy")  # what `write_plots` may draw, one figure each
VAL_ACC = re.compile(r"^val-core/.+/acc/mean@(\d+)$")  # verl's validation accuracy, mean@N over N samples


def plot_names(fmt: str = "png") -> tuple[str, ...]:
    return tuple(f"{v}.{fmt}" for v in VIEWS)


def colors_for(algos: Sequence[str]) -> dict[str, str]:
    """A colour per algorithm: the known ones their own, any other the next of `PALETTE` (same order, same colour)."""
    spare = iter(PALETTE * (1 + len(algos) // len(PALETTE)))
    return {a: COLORS.get(a.lower()) or next(spare) for a in algos}


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


def value_range(kind: str, values: Sequence[np.ndarray]) -> Optional[tuple[float, float]]:
    """The range a band is clipped to: kind "share" (accuracy, a share): [0, 1]; "reward": [0, 1] when every
    finite value logged is in it (a 0/1 verifier's reward), else None (unknown: not clipped)."""
    inside = all(((v >= 0) & (v <= 1))[np.isfinite(v)].all() for v in map(np.asarray, values))
    return (0.0, 1.0) if kind == "share" or inside else None


def seed_curves(xs: Sequence[np.ndarray], ys: Sequence[np.ndarray], by: str) -> tuple[np.ndarray, np.ndarray]:
    """Per-seed curves on one x grid: by="step": the steps every seed logged (xs: each seed's steps);
    by="answers": `POINTS` points from the smallest first x to the largest last x, or every seed's own x when each
    has fewer than `SPARSE` (xs: cumulative answers, each seed's curve interpolated, NaN past its own end and
    before its start). Returns (x (points,), curves (seeds, points))."""
    if by == "step":
        common = xs[0]
        for x in xs[1:]:
            common = np.intersect1d(common, x)
        return common, np.stack([y[np.searchsorted(x, common)] for x, y in zip(xs, ys)])
    if max(len(x) for x in xs) < SPARSE:  # few points (validation): the seeds' own x, so markers sit on data
        grid = np.unique(np.concatenate([np.asarray(x, dtype=np.float64) for x in xs]))
    else:
        grid = np.linspace(min(float(x[0]) for x in xs), max(float(x[-1]) for x in xs), POINTS)
    inside = [(grid >= float(x[0]) - 1e-9) & (grid <= float(x[-1]) + 1e-9) for x in xs]
    return grid, np.stack([np.where(ok, np.interp(grid, x, y), np.nan) for ok, x, y in zip(inside, xs, ys)])


def draw(ax, x: np.ndarray, curves: np.ndarray, color, label: str, clip: Optional[tuple[float, float]] = None,
         seed_xy: Optional[Sequence[tuple[np.ndarray, np.ndarray]]] = None) -> None:
    """Each seed faint (its own (x, y) from `seed_xy` when given, else the rows of `curves`), the mean bold and,
    with two seeds or more, its 95% band, clipped to `clip`. Markers on curves of fewer than `SPARSE` points.
    Without a common x (`x` empty: seeds logged at different steps) each seed's points, plainly, and no mean."""
    pairs = seed_xy if seed_xy is not None else [(x, c) for c in curves]
    marker = dict(marker="o", markersize=4.5) if not x.size or max(len(sx) for sx, _ in pairs) < SPARSE else {}
    for i, (sx, sy) in enumerate(pairs):
        ax.plot(sx, sy, color=color, alpha=0.3 if x.size else 0.9, linewidth=0.9,
                label=None if x.size or i else f"{label}, each seed", **marker)
    if not x.size:
        return
    mean, lo, hi = band(curves)
    if len(curves) > 1:
        if clip is not None:
            lo, hi = np.clip(lo, *clip), np.clip(hi, *clip)
        ax.fill_between(x, lo, hi, color=color, alpha=0.18, linewidth=0)
    ax.plot(x, mean, color=color, linewidth=2.2, label=label, **marker)


def figure(panels: int):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, panels, figsize=(5.4 * panels, 4.6), squeeze=False)
    return plt, fig, list(axes[0])


def caption(seeds: dict[str, int], window: int, clip: Optional[tuple[float, float]], answers_panel: bool = False,
            every: str = "step", apart: Sequence[str] = (), per_step: Optional[float] = None) -> str:
    """What a figure shows, under it: smoothing, seeds, band and clipping, the answers panel's extent (or, with
    `per_step`, why there is none), and the algorithms `apart` whose seeds share no logged step."""
    n = sorted(set(seeds.values()))
    counts = f"{n[0]} seed{'s' if n[0] > 1 else ''}" if len(n) == 1 else f"{n[0]}-{n[-1]} seeds (legend)"
    clipped = f" clipped to [{clip[0]:g}, {clip[1]:g}]" if clip is not None else ""
    parts = [f"moving average over {window} logged {every}s" if window > 1 else f"every logged {every}, unsmoothed",
             "" if len(apart) == len(seeds) else f"{counts} per algorithm: no band" if n[-1] == 1 else
             f"bold: mean over {counts}, band: its 95% t interval{clipped}; faint: each seed",
             apart and f"{', '.join(NAMES.get(a, a) for a in apart)}: the seeds logged different {every}s, so each "
             "seed's points are drawn, no mean",
             "against answers generated: each seed to its own end, the mean where every seed has reached"
             if answers_panel else per_step and f"{per_step:,.0f} answers generated a step in every run"]
    return "; ".join(p for p in parts if p) + "."


def finish(ax, clip: Optional[tuple[float, float]]) -> None:
    """Grid, and a y view that fits the data, never beyond `clip` (with 2% room)."""
    if clip is not None:
        pad = 0.02 * (clip[1] - clip[0])
        lo, hi = ax.get_ylim()
        ax.set_ylim(max(lo, clip[0] - pad), min(hi, clip[1] + pad))
    ax.grid(alpha=0.3)


def save(plt, fig, path: str | Path, title: str, note: str) -> None:
    """`fig` with its title and caption (`note`) to `path` (atomically), PNG at `DPI` or the format of its suffix."""
    from verl_ebpo.tools.files import atomic_output

    fmt = Path(path).suffix.lstrip(".")
    import textwrap

    fig.suptitle(title)
    width = 40 * len(fig.axes) + 30
    fig.text(0.5, 0.01, textwrap.fill(note, width), ha="center", va="bottom", fontsize=8.5)
    fig.tight_layout(rect=(0, 0.07 + 0.02 * (len(note) // width), 1, 1))
    with atomic_output(path) as tmp:
        fig.savefig(tmp, dpi=DPI, format=fmt, **({"metadata": {"Date": None}} if fmt == "svg" else {}))
    plt.close(fig)


def answers_per_step(curves: dict) -> Optional[float]:
    """The answers every run generated at each step when that is one number (the answers panel would repeat the
    step panel), else None. curves as `metric_figure`'s."""
    seeds = [(s, a) for runs in curves.values() for s, a, _ in runs]
    if any(a is None or not len(s) or not s[-1] for s, a in seeds):
        return None
    rate = float(seeds[0][1][-1] / seeds[0][0][-1])
    return rate if all(np.allclose(a, rate * np.asarray(s)) for s, a in seeds) else None


def metric_figure(curves: dict[str, list[tuple[np.ndarray, Optional[np.ndarray], np.ndarray]]], ylabel: str,
                  title: str, window: int = 5, kind: str = "reward", every: str = "step"):
    """(plt, fig, caption) of one metric against steps and, when every run's answers are known and not the same
    number a step for all, against answers generated. curves: algo -> per seed (steps, cumulative answers at those
    steps or None, values); values smoothed over `window` logged points; kind: `value_range`'s."""
    from matplotlib.ticker import EngFormatter, MaxNLocator

    clip = value_range(kind, [v for seeds in curves.values() for _, _, v in seeds])
    per_step = answers_per_step(curves)
    with_answers = per_step is None and all(a is not None for seeds in curves.values() for _, a, _ in seeds)
    plt, fig, axes = figure(2 if with_answers else 1)
    colors = colors_for(list(curves))
    apart = []
    for algo, seeds in curves.items():
        label = f"{NAMES.get(algo, algo)} ({len(seeds)} seed{'s' if len(seeds) > 1 else ''})"
        ys = [smooth(v, window) for _, _, v in seeds]
        x, c = seed_curves([s for s, _, _ in seeds], ys, "step")
        if 2 * x.size < min(len(s) for s, _, _ in seeds):  # seeds at different steps: a mean of few points misleads
            apart.append(algo)
            x, c = x[:0], c[:, :0]
        draw(axes[0], x, c, colors[algo], label, clip, seed_xy=[(s, y) for (s, _, _), y in zip(seeds, ys)])
        if with_answers:
            x, c = seed_curves([a for _, a, _ in seeds], ys, "answers")
            draw(axes[1], x, c, colors[algo], label, clip, seed_xy=[(a, y) for (_, a, _), y in zip(seeds, ys)])
    axes[0].set_xlabel("training step")
    axes[0].xaxis.set_major_locator(MaxNLocator(integer=True))
    if with_answers:  # readable ticks: 50k, 1.5M
        axes[1].xaxis.set_major_formatter(EngFormatter(sep=""))
        axes[1].set_xlabel("answers generated (cumulative)")
    for ax in axes:
        ax.set_ylabel(ylabel)
        finish(ax, clip)
    axes[0].legend(loc="best")
    note = caption({a: len(s) for a, s in curves.items()}, window, clip, with_answers, every, apart, per_step)
    return plt, fig, note


def write_plots(runs: dict, out: Path, fmt: str = "png",
                views: Sequence[str] = VIEWS) -> list[str]:
    """`verl-ebpo compare`'s figures (`VIEWS`, those of `views`): the mean reward of all answers generated
    (`Run.reward_all`: verl's `critic/score/mean`, for DAPO with its dropped groups' rewards; a DAPO algorithm
    without them is left out), and validation accuracy (the mean of `val-core/<source>/acc/mean@N`), each when
    every run of an algorithm has it. Returns the files written."""
    written = []
    reward: dict = {}
    accuracy: dict = {}
    samples = set()
    for algo, rs in runs.items():
        if all(r.reward_all is not None for r in rs):
            reward[algo] = [(r.steps, r.cum_answers if r.answers is not None else None, r.reward_all) for r in rs]
        per_run = []
        for r in rs:
            keys = [k for k in r.val if VAL_ACC.match(k)]
            samples |= {VAL_ACC.match(k).group(1) for k in keys}
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
        (reward, "training_reward", "reward of all answers generated", "Training reward (all answers generated)",
         5, "reward", "step"),
        (accuracy, "validation_accuracy", f"validation accuracy (acc/mean@{'/'.join(sorted(samples, key=int))})", "Validation accuracy", 1,
         "share", "validation")) if job[0] and job[1] in views]
    for curves, view, ylabel, title, window, kind, every in jobs:
        plt, fig, note = metric_figure(curves, ylabel, title, window, kind, every)
        save(plt, fig, Path(out) / f"{view}.{fmt}", title, note)
        written.append(f"{view}.{fmt}")
    return written
