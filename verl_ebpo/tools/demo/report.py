"""From verl's metrics files to the demo's results: per-run series, statistics over seeds (summary.json),
steps.csv and the reward figure; the demo's report.md is `verl-ebpo compare`'s over the same runs.

Everything here is computed from what verl wrote (read by `verl_ebpo.tools.verl_logs`), per run:
- answers generated at step t: the answers trained on (`batch x G`, from the rollout dump) plus, for DAPO, the
  answers of the groups verl's dynamic sampling dropped or did not need (`training/filter_groups/*`, counted
  in groups, times G);
- reward at step t: the mean reward of all answers generated at t (for DAPO the dropped ones included, whose
  rewards the plugin's replay buffer logs as `replay/discarded_reward_sum`): verl's `critic/score/mean` covers
  only the answers trained on, which for DAPO excludes exactly the groups that were all wrong or all right;
- share of answers without learning signal: answers with advantage 0 (EBPO logs its own share; for the
  group-mean baselines an answer's advantage is 0 exactly when its group's rewards are all equal, read from
  the rollout dump) plus the answers DAPO dropped, over the answers generated;
- greedy accuracy: verl's validation (`val-core/.../acc/mean@1`, greedy) on the 9 questions after training.
Over seeds: `verl-ebpo compare`'s statistics and curves (`verl_ebpo.tools.compare.report` / `.plots`: final
values, equal answer budgets, t intervals, paired differences and verdicts from `verl_ebpo.tools.stats`), so the
demo and compare state results the same way; this module only derives the demo's series.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from verl_ebpo.tools import verl_logs
from verl_ebpo.tools.compare.plots import NAMES, draw, figure, save, seed_curves, smooth
from verl_ebpo.tools.compare.report import at_budget, budget_window, clip01, json_safe, paired  # noqa: F401
from verl_ebpo.tools.compare.runs import answers_generated
from verl_ebpo.tools.stats import mean_ci, verdict

TAIL = 10  # "final" = mean over the last TAIL steps


@dataclass
class RunSeries:
    """One training run, step by step (index i is step i + 1)."""

    algo: str
    seed: int
    answers: np.ndarray  # (steps,) answers generated at each step
    reward: np.ndarray  # (steps,) mean reward of the answers generated
    trained_reward: np.ndarray  # (steps,) verl's critic/score/mean: the answers trained on
    no_signal: np.ndarray  # (steps,) share of the answers generated that taught nothing (NaN: unknown)
    step_time: np.ndarray  # (steps,) seconds (timing_s/step)
    greedy_before: Optional[float] = None
    greedy_after: Optional[float] = None
    wall_s: Optional[float] = None  # the run's wall time, verl start-up included

    @property
    def steps(self) -> int:
        return len(self.reward)

    @property
    def cum_answers(self) -> np.ndarray:
        return np.cumsum(self.answers)



def run_series(algo: str, seed: int, metrics: dict[int, dict], dumps: dict[int, list[dict]],
               batch_size: int, group_size: int, wall_s: Optional[float] = None) -> RunSeries:
    """A run's series from its verl metrics (`verl_logs.read_metrics`) and rollout dumps."""
    steps = sorted(s for s in metrics if s >= 1 and verl_logs.SCORE in metrics[s])  # 1..N (the runner counts them)
    answers, reward, trained_reward, no_signal, step_time = [], [], [], [], []
    for step in steps:
        m = metrics[step]
        dumped = dumps.get(step)
        trained = len(dumped) if dumped else batch_size * group_size
        dropped = answers_generated(m, trained, group_size) - trained  # DAPO's dropped groups x G (compare's count)
        score = float(m[verl_logs.SCORE])
        # the dropped answers' rewards: logged by the plugin's replay buffer, which the demo's DAPO runs use
        total_reward = score * trained + (float(m[verl_logs.DISCARDED_REWARD_SUM]) if dropped > 0 else 0.0)
        if algo == "ebpo" and "ebpo/zero_adv_frac" in m:
            zero_trained = float(m["ebpo/zero_adv_frac"]) * trained
        elif dumped:
            zero_trained = sum(len(v) for v in verl_logs.group_scores(dumped).values() if max(v) == min(v))
        else:
            zero_trained = math.nan
        answers.append(trained + dropped)
        reward.append(total_reward / (trained + dropped))
        trained_reward.append(score)
        no_signal.append((zero_trained + dropped) / (trained + dropped))
        step_time.append(verl_logs.value(m, verl_logs.STEP_TIME, math.nan))
    val = verl_logs.validation_accuracy(metrics)
    return RunSeries(
        algo=algo, seed=seed, answers=np.asarray(answers, dtype=np.float64), reward=np.asarray(reward),
        trained_reward=np.asarray(trained_reward), no_signal=np.asarray(no_signal, dtype=np.float64),
        step_time=np.asarray(step_time, dtype=np.float64), greedy_before=val.get(0),
        greedy_after=val[max(val)] if val and max(val) > 0 else None, wall_s=wall_s,
    )


def summarize(runs: dict[str, list[RunSeries]], tail: int = TAIL) -> dict:
    """The `algos` and `comparisons` parts of summary.json (runs: algo -> one RunSeries per seed, at least one)."""
    steps = {s.steps for series in runs.values() for s in series}
    tail = min(tail, min(steps))
    budget, window = budget_window([s.answers for series in runs.values() for s in series], tail)
    algos, per_seed = {}, {}
    for algo, series in runs.items():
        series = sorted(series, key=lambda s: s.seed)
        final = [float(np.mean(s.reward[-tail:])) for s in series]
        at_equal = [at_budget(s.reward, s.answers, budget, window) for s in series]
        greedy = [s.greedy_after for s in series]
        answers = [float(s.cum_answers[-1]) for s in series]
        early = [float(np.nanmean(s.no_signal[:tail])) for s in series]
        late = [float(np.nanmean(s.no_signal[-tail:])) for s in series]
        entry = {
            "seeds": [s.seed for s in series],
            "final_reward_mean": mean_ci(final).mean,
            "final_reward_ci95": mean_ci(final).as_list(),
            "answers_generated": int(round(float(np.mean(answers)))),
            "greedy_accuracy_mean": mean_ci(greedy).mean if None not in greedy else None,
            "final_reward_per_seed": final,
            "final_reward_at_equal_budget_mean": mean_ci(at_equal).mean,
            "final_reward_at_equal_budget_ci95": mean_ci(at_equal).as_list(),
            "final_reward_at_equal_budget_per_seed": at_equal,
            "final_trained_reward_mean": float(np.mean([np.mean(s.trained_reward[-tail:]) for s in series])),
            "greedy_accuracy_ci95": clip01(mean_ci(greedy).as_list()) if None not in greedy else [None, None],
            "greedy_accuracy_per_seed": greedy,
            "greedy_accuracy_before_mean": (float(np.mean([s.greedy_before for s in series]))
                                            if all(s.greedy_before is not None for s in series) else None),
            "answers_generated_per_seed": answers,
            "steps": int(series[0].steps),
            "no_signal_share_first_steps": float(np.mean(early)),
            "no_signal_share_last_steps": float(np.mean(late)),
            "step_seconds_mean": float(np.nanmean(np.concatenate([s.step_time for s in series]))),
            "run_seconds_mean": (float(np.mean([s.wall_s for s in series]))
                                 if all(s.wall_s is not None for s in series) else None),
        }
        algos[algo] = entry
        per_seed[algo] = {"final": dict(zip(entry["seeds"], final)), "budget": dict(zip(entry["seeds"], at_equal)),
                          "greedy": dict(zip(entry["seeds"], greedy))}
    comparisons = {}
    if "ebpo" in runs:
        for base in (a for a in runs if a != "ebpo"):
            seeds = sorted(set(per_seed["ebpo"]["final"]) & set(per_seed[base]["final"]))
            if not seeds:
                continue
            item = {"seeds": seeds}
            for key, what, label in (("final", f"final reward (mean of the last {tail} steps)", ""),
                                      ("budget", f"final reward at an equal budget of {budget:.0f} answers",
                                       "equal_budget_"),
                                      ("greedy", "greedy accuracy after training", "greedy_accuracy_")):
                if any(per_seed[algo][key][s] is None for s in seeds for algo in ("ebpo", base)):
                    continue
                diff, _ = paired({s: per_seed["ebpo"][key][s] for s in seeds}, {s: per_seed[base][key][s] for s in seeds})
                item[f"{label}diff"] = diff.mean
                item[f"{label}ci95"] = diff.as_list()
                item[f"{label}verdict"] = verdict(NAMES["ebpo"], NAMES.get(base, base), diff, what)
            comparisons[f"ebpo-{base}"] = item
    return {"algos": algos, "comparisons": comparisons, "equal_budget_answers": budget, "tail_steps": tail}


def time_rows(runs: dict[str, list[RunSeries]]) -> list[dict]:
    """Where the time went, per algorithm: run wall time, start-up + shut-down (wall minus the steps), step time
    (verl's `timing_s/*` phases of each step stay in the runs' metrics files)."""
    rows = []
    for algo, series in runs.items():
        wall = [s.wall_s for s in series if s.wall_s is not None]
        total_steps = [float(np.nansum(s.step_time)) for s in series]
        row = {
            "algo": algo,
            "runs": len(series),
            "run_s": float(np.mean(wall)) if wall else math.nan,
            "startup_s": float(np.mean([w - t for w, t in zip(wall, total_steps)])) if wall else math.nan,
            "step_s": float(np.nanmean(np.concatenate([s.step_time for s in series]))),
        }
        rows.append(row)
    return rows


def steps_csv(runs: dict[str, list[RunSeries]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["algo", "seed", "step", "answers_generated", "cum_answers", "reward_generated", "reward_trained",
                     "no_signal_share", "step_time_s"])
    for algo, series in runs.items():
        for s in sorted(series, key=lambda s: s.seed):
            cum = s.cum_answers
            for i in range(s.steps):
                writer.writerow([algo, s.seed, i + 1, f"{s.answers[i]:g}", f"{cum[i]:g}", f"{s.reward[i]:.6f}",
                                 f"{s.trained_reward[i]:.6f}",
                                 "" if math.isnan(s.no_signal[i]) else f"{s.no_signal[i]:.6f}",
                                 "" if math.isnan(s.step_time[i]) else f"{s.step_time[i]:.4f}"])
    return out.getvalue()


def plot(runs: dict[str, list[RunSeries]], path: str | Path, title: str = "", window: int = 5) -> None:
    """The demo's figure (`path`'s suffix: png, pdf or svg): the reward of all answers generated against steps and
    against answers generated, and the share without learning signal; every seed a faint line in its algorithm's
    colour, the mean over seeds bold with its 95% band clipped to [0, 1] (both are shares), the smoothing, seeds and
    clipping stated under the panels (`compare.plots.caption`)."""
    from verl_ebpo.tools.compare.plots import caption, colors_for, finish

    plt, fig, axes = figure(3)
    colors = colors_for(list(runs))
    for algo, series in runs.items():
        label = f"{NAMES.get(algo, algo)} ({len(series)} seed{'s' if len(series) > 1 else ''})"
        steps = [np.arange(1, s.steps + 1) for s in series]
        rewards = [smooth(s.reward, window) for s in series]
        shares = [smooth(s.no_signal, window) for s in series]
        cum = [s.cum_answers for s in series]
        for ax, (x, curves), xs, ys in zip(axes, (seed_curves(steps, rewards, "step"), seed_curves(cum, rewards, "answers"),
                                                   seed_curves(steps, shares, "step")),
                                           (steps, cum, steps), (rewards, rewards, shares)):
            draw(ax, x, curves, colors[algo], label, (0.0, 1.0), seed_xy=list(zip(xs, ys)))
    axes[0].set_xlabel("training step")
    axes[0].set_ylabel("reward of the answers generated")
    axes[1].set_xlabel("answers generated (cumulative)")
    axes[1].set_ylabel("reward of the answers generated")
    axes[2].set_xlabel("training step")
    axes[2].set_ylabel("share with advantage exactly 0, or dropped")
    for ax in axes:
        finish(ax, (0.0, 1.0))
    axes[0].legend(loc="upper left")
    note = caption({a: len(s) for a, s in runs.items()}, window, (0.0, 1.0), answers_panel=True)
    save(plt, fig, path, title or "verl on CPU: reward of all answers generated; answers with advantage 0 or dropped",
         note)
