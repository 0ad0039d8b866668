"""The default report: a family of model regimes, each estimator at its own best learning rate (best-vs-best).

A regime fixes the model knobs that decide where all-fail groups matter (`REGIMES`):

| regime | beta (difficulty) | transfer (glob, topic, feat, own) | score noise |
|---|---|---|---|
| `shared` | 0.5 1.5 (mean 0.25) | 0.3 0.3 0.2 0.2: learning mostly global | 10 |
| `per_prompt` | 0.5 1.5 | 0.05 0.05 0.1 0.8: per-prompt parameters dominate | 10 |
| `hard` | 0.3 3 (mean 0.09) | 0.3 0.3 0.2 0.2 | 10 |

Learning rate: for every (regime, estimator, G) all grid values run at once (rows of one batched run, seeds x
lrs); the lr with the highest mean AUC on the *tuning* seeds (`SimOptions.tune_seed_list`, disjoint from the
reporting seeds) is chosen, ties to the smaller lr, before the reporting seeds are read; the reporting seeds at
that lr are the reported cell. Every row of a seed shares its task and its samples' random stream.
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np
import torch

from verl_ebpo.tools.simulate.engine import RunResult, Sweep, one_torch_thread, run_one
from verl_ebpo.tools.simulate.estimators import parse_estimator
from verl_ebpo.tools.simulate.options import SimOptions

_BASE = {"beta": (0.5, 1.5), "transfer": (0.3, 0.3, 0.2, 0.2), "score_noise": 10.0}
REGIMES: dict[str, dict] = {
    "shared": dict(_BASE),
    "per_prompt": {**_BASE, "transfer": (0.05, 0.05, 0.1, 0.8)},
    "hard": {**_BASE, "beta": (0.3, 3.0)},
}
LR_RULE = "highest mean AUC on the tuning seeds (ties: the smaller lr); reporting seeds not used"


def regime_options(options: SimOptions, name: str) -> SimOptions:
    """The options of regime `name` (`custom`: the options as given)."""
    if name == "custom":
        return options
    return dataclasses.replace(options, regime="custom", **REGIMES[name])


def auc(curve: np.ndarray) -> np.ndarray:
    """(S,) area under success vs answers generated, divided by the budget (trapezoids over the step grid):
    the mean success over the run. curve: (S, steps + 1)."""
    if curve.shape[1] < 2:
        return curve[:, 0].copy()
    return ((curve[:, 1:] + curve[:, :-1]) / 2).mean(axis=1)


def gain_shape(curve: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """How fast success rises: (S,) the share of the run's final gain made by the first step,
    (curve[:, 1] - curve[:, 0]) / (curve[:, -1] - curve[:, 0]) (NaN when there is no gain), and (S,) the steps
    until half the final gain (the first k with curve[:, k] - curve[:, 0] >= gain / 2). curve: (S, steps + 1)."""
    gain = curve[:, -1] - curve[:, 0]
    with np.errstate(invalid="ignore", divide="ignore"):
        first = np.where(gain > 0, (curve[:, 1] - curve[:, 0]) / gain, np.nan) if curve.shape[1] > 1 else gain * np.nan
    half = np.argmax(curve - curve[:, :1] >= gain[:, None] / 2, axis=1)
    return first, half.astype(np.float64)


def subset(run: RunResult, rows) -> RunResult:
    """The rows `rows` of a batched run (every per-seed array indexed; scalars kept)."""
    fields = {f.name: getattr(run, f.name) for f in dataclasses.fields(run)}
    return RunResult(**{k: (v[rows] if isinstance(v, np.ndarray) else v) for k, v in fields.items()})


@dataclasses.dataclass
class Family:
    options: SimOptions
    sweeps: dict = dataclasses.field(default_factory=dict)  # regime -> Sweep (reporting seeds, chosen lr)
    lrs: dict = dataclasses.field(default_factory=dict)  # regime -> {(label, G): lr}
    tune_auc: dict = dataclasses.field(default_factory=dict)  # regime -> {(label, G): [mean AUC per grid lr]}
    grids: dict = dataclasses.field(default_factory=dict)  # regime -> {(label, G): the cell's grid, extended}
    gradients: dict = dataclasses.field(default_factory=dict)  # regime -> {(label, G): GradientResult}
    seconds: float = 0.0


LR_LIMITS = (1e-4, 1e3)  # an extended grid stays inside these
MAX_EXTEND = 4  # grid values added beyond either end of the given grid, at most


def beyond(grid, up: bool) -> float | None:
    """The next learning rate past the top (up) or bottom of `grid` (sorted, >= 2 values): on the 1-3 sequence
    (..., 1, 3, 10, 30, ...) when the edge lies on it, else the edge times the ratio of its two outermost values;
    None past `LR_LIMITS`."""
    edge, inner = (grid[-1], grid[-2]) if up else (grid[0], grid[1])
    mantissa = edge / 10 ** math.floor(math.log10(edge) + 1e-9)
    if math.isclose(mantissa, 1.0, rel_tol=1e-6):
        nxt = edge * 3 if up else edge * 0.3
    elif math.isclose(mantissa, 3.0, rel_tol=1e-6):
        nxt = edge * 10 / 3 if up else edge / 3
    else:
        nxt = edge * edge / inner
    nxt = float(f"{nxt:.6g}")
    return nxt if LR_LIMITS[0] <= nxt <= LR_LIMITS[1] else None


def task_rows(task, n: int):
    """The first n rows of a batched task (every per-row tensor sliced)."""
    return dataclasses.replace(task, **{f.name: getattr(task, f.name)[:n] for f in dataclasses.fields(task)
                                        if isinstance(getattr(task, f.name), torch.Tensor)})


def run_cell(task, spec, G: int, options: SimOptions) -> tuple[RunResult, float, list[float], list[float]]:
    """One (estimator, G) of a regime: every lr x (tuning + reporting seeds) in one batched run; while the best lr
    on the tuning seeds is at an end of the grid (and the grid has >= 2 values), one more lr past that end
    (`beyond`, at most `MAX_EXTEND` per end) runs too. Returns the reporting seeds' run at the chosen lr, that lr,
    the tuning seeds' mean AUC per lr of the final grid, and that grid (increasing)."""
    tune, report = options.tune_seed_list, options.seed_list
    per_lr = len(tune) + len(report)
    lrs = sorted(options.lrs)
    seeds = [s for _ in lrs for s in (*tune, *report)]
    run = run_one(task, spec, G, options, seeds=seeds, lrs=np.repeat(lrs, per_lr))
    runs = {lr: subset(run, np.arange(i * per_lr, (i + 1) * per_lr)) for i, lr in enumerate(lrs)}
    one = task_rows(task, per_lr)  # the rows of one lr (every lr's rows hold the same seeds)
    added = {True: 0, False: 0}
    while True:
        scores = [float(auc(runs[lr].curve)[: len(tune)].mean()) for lr in lrs]
        best = int(np.flatnonzero(np.asarray(scores) == max(scores))[0])  # ties: the smaller lr
        up = best == len(lrs) - 1
        if len(lrs) < 2 or best not in (0, len(lrs) - 1) or added[up] >= MAX_EXTEND:
            break
        nxt = beyond(lrs, up)
        if nxt is None:
            break
        added[up] += 1
        runs[nxt] = run_one(one, spec, G, options, seeds=[*tune, *report], lrs=np.full(per_lr, nxt))
        lrs = sorted(runs)
    chosen = lrs[best]
    return subset(runs[chosen], np.arange(len(tune), per_lr)), float(chosen), scores, [float(x) for x in lrs]


def run_family(options: SimOptions, progress=None) -> Family:
    """Every regime of `options.regime_names` (or `custom`) x estimator x G, best-vs-best; with `grad_draws` > 0
    also each cell's gradient statistics at the initial policy (`gradient.measure`, reporting seeds).
    progress(regime, run, lr) is called after every cell."""
    from verl_ebpo.tools.simulate.engine import build_task
    from verl_ebpo.tools.simulate.gradient import measure

    t0 = time.perf_counter()
    family = Family(options)
    specs = [parse_estimator(e) for e in options.estimators]
    names = ("custom",) if options.regime == "custom" else options.regime_names
    with one_torch_thread():
        for name in names:
            o = regime_options(options, name)
            task = build_task_rows(o)
            sweep = Sweep(o)
            family.lrs[name], family.tune_auc[name], family.gradients[name], family.grids[name] = {}, {}, {}, {}
            report_task = build_task(o) if o.grad_draws else None
            for spec in specs:
                for G in o.G:
                    if report_task is not None:
                        family.gradients[name][(spec.label, G)] = measure(report_task, spec, G, o, o.seed_list,
                                                                          o.grad_draws, o.grad_warmup)
                    run, lr, scores, grid = run_cell(task, spec, G, o)
                    family.grids[name][(spec.label, G)] = grid
                    sweep.runs[(spec.label, G)] = run
                    family.lrs[name][(spec.label, G)] = lr
                    family.tune_auc[name][(spec.label, G)] = scores
                    if progress is not None:
                        progress(name, run, lr)
            sweep.seconds = time.perf_counter() - t0
            family.sweeps[name] = sweep
    family.seconds = time.perf_counter() - t0
    return family


def build_task_rows(options: SimOptions):
    """The task of every row of `run_cell` (lr-major; tuning seeds, then reporting seeds)."""
    from verl_ebpo.tools.simulate.task import make_task

    rows = [s for _ in options.lrs for s in (*options.tune_seed_list, *options.seed_list)]
    return make_task(rows, options.prompts, options.heldout, options.beta, options.topics, options.concentration,
                     options.features, options.transfer, options.erosion)
