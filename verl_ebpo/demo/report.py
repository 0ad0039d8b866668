"""Read a CPU demo run's logs back (verl's file logger and rollout dumps); write table, plot, report.

Sources, per run folder:
- `metrics.jsonl`: verl's file logger (`trainer.logger=[...,'file']`, `VERL_FILE_LOGGER_PATH`), one
  line `{"step": N, "data": {...}}` per training step (validation at step 0 has its own line);
- `rollouts/N.jsonl`: verl's rollout dump (`trainer.rollout_data_dir`), one line per answer of step N
  with its score and `uid` = `<prompt uid>_<sample>_<output>`.
The share of zero-advantage answers is logged by EBPO itself (`ebpo/zero_adv_frac`); for GRPO it is
computed here from the dumps: GRPO's advantage (r - mean) / (std + eps) is zero exactly for the answers
of groups whose rewards are all equal, so the share is that of answers in all-equal groups.
"""

from __future__ import annotations

import csv
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Iterable, Optional

COLUMNS = (
    "algorithm",
    "step",
    "reward",
    "zero_adv_frac",
    "equal_reward_group_frac",
    "all_fail_group_frac",
    "ebpo_shrinkage_mean",
    "ebpo_prior_mean",
    "ebpo_sigma2",
    "ebpo_tau2",
    "step_time_s",
)


def load_metrics(path: str | Path) -> dict[int, dict]:
    """step -> merged metrics of verl's file logger (later lines of a step update earlier ones)."""
    steps: dict[int, dict] = defaultdict(dict)
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: not JSON ({exc})") from None
            steps[int(record["step"])].update(record["data"])
    return dict(steps)


def group_key(uid: str) -> str:
    """The prompt uid of a dumped answer (`<uid>_<sample>_<output>`)."""
    parts = uid.rsplit("_", 2)
    return parts[0] if len(parts) == 3 else uid


def load_rollouts(rollout_dir: str | Path) -> dict[int, list[dict]]:
    """step -> dumped answers (verl's `trainer.rollout_data_dir`)."""
    out: dict[int, list[dict]] = {}
    for path in sorted(Path(rollout_dir).glob("*.jsonl")):
        if not path.stem.isdigit():
            continue
        with open(path) as f:
            out[int(path.stem)] = [json.loads(line) for line in f if line.strip()]
    return out


def group_stats(answers: Iterable[dict]) -> dict:
    """Reward mean, share of answers in all-equal groups, share of all-fail groups, of one step."""
    groups: dict[str, list[float]] = defaultdict(list)
    for answer in answers:
        groups[group_key(answer["uid"])].append(float(answer["score"]))
    if not groups:
        return {}
    n_answers = sum(len(v) for v in groups.values())
    equal = [v for v in groups.values() if max(v) == min(v)]
    return {
        "reward": sum(sum(v) for v in groups.values()) / n_answers,
        "zero_adv_frac_grpo": sum(len(v) for v in equal) / n_answers,
        "equal_reward_group_frac": len(equal) / len(groups),
        "all_fail_group_frac": sum(1 for v in groups.values() if max(v) <= 0) / len(groups),
        "groups": len(groups),
        "answers": n_answers,
    }


def step_rows(algorithm: str, metrics: dict[int, dict], rollouts: dict[int, list[dict]]) -> list[dict]:
    rows = []
    for step in sorted(s for s in metrics if s >= 1 and "critic/score/mean" in metrics[s]):
        m = metrics[step]
        g = group_stats(rollouts.get(step, []))
        # EBPO logs its own share; for GRPO (any group-mean estimator) it is the all-equal groups' answers
        zero = m.get("ebpo/zero_adv_frac") if algorithm == "ebpo" else g.get("zero_adv_frac_grpo")
        rows.append(
            {
                "algorithm": algorithm,
                "step": step,
                "reward": m["critic/score/mean"],
                "zero_adv_frac": zero,
                "equal_reward_group_frac": m.get("ebpo/equal_reward_group_frac", g.get("equal_reward_group_frac")),
                "all_fail_group_frac": g.get("all_fail_group_frac"),
                "ebpo_shrinkage_mean": m.get("ebpo/shrinkage_mean"),
                "ebpo_prior_mean": m.get("ebpo/prior_mean"),
                "ebpo_sigma2": m.get("ebpo/sigma2"),
                "ebpo_tau2": m.get("ebpo/tau2"),
                "step_time_s": m.get("timing_s/step"),
            }
        )
    return rows


def validation_accuracy(metrics: dict[int, dict]) -> dict[int, float]:
    """step -> greedy validation accuracy (verl's `val-core/<source>/acc/mean@1`)."""
    out = {}
    for step, m in metrics.items():
        for key, value in m.items():
            if key.startswith("val-core/") and key.endswith("/acc/mean@1"):
                out[step] = float(value)
    return out


def write_csv(rows: list[dict], path: str | Path) -> Path:
    path = Path(path)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(COLUMNS))
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in COLUMNS})
    return path


def moving_average(values: list[float], window: int) -> list[float]:
    out, total = [], 0.0
    for i, value in enumerate(values):
        total += value
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def mean(values: Iterable[Optional[float]]) -> Optional[float]:
    values = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return sum(values) / len(values) if values else None


def plot(rows_by_algorithm: dict[str, list[dict]], path: str | Path, window: int = 10) -> Path:
    """Reward per step (thin) and its moving average (thick), and the share of zero-advantage answers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"grpo": "tab:blue", "ebpo": "tab:orange"}
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 7), sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    for algorithm, rows in rows_by_algorithm.items():
        steps = [r["step"] for r in rows]
        reward = [r["reward"] for r in rows]
        color = colors.get(algorithm)
        ax1.plot(steps, reward, color=color, alpha=0.3, linewidth=1)
        ax1.plot(steps, moving_average(reward, window), color=color, linewidth=2.2,
                 label=f"{algorithm.upper()} (moving average of {window})")
        zero = [(r["step"], r["zero_adv_frac"]) for r in rows if r["zero_adv_frac"] is not None]
        if zero:
            ax2.plot([s for s, _ in zero], [z for _, z in zero], color=color, linewidth=1.5, label=algorithm.upper())
    ax1.set_ylabel("training reward (share of correct answers)")
    ax1.set_ylim(0, 1)
    ax1.grid(alpha=0.3)
    ax1.legend(loc="upper left")
    ax1.set_title("verl main_ppo on CPU: tiny Llama, successor task, G=4")
    ax2.set_ylabel("share of answers with advantage 0")
    ax2.set_xlabel("training step")
    ax2.set_ylim(-0.02, 1.02)
    ax2.grid(alpha=0.3)
    ax2.legend(loc="upper right")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def summarize(algorithm: str, rows: list[dict], metrics: dict[int, dict], tail: int = 10) -> dict:
    val = validation_accuracy(metrics)
    last = rows[-tail:]
    first = rows[:tail]
    return {
        "algorithm": algorithm,
        "steps": len(rows),
        "reward_first": mean(r["reward"] for r in first),
        "reward_last": mean(r["reward"] for r in last),
        "reward_final_step": rows[-1]["reward"] if rows else None,
        "zero_adv_frac_first": mean(r["zero_adv_frac"] for r in first),
        "zero_adv_frac_last": mean(r["zero_adv_frac"] for r in last),
        "all_fail_group_frac_first": mean(r["all_fail_group_frac"] for r in first),
        "val_acc_before": val.get(0),
        "val_acc_after": val[max(val)] if val and max(val) > 0 else None,
        "step_time_s": mean(r["step_time_s"] for r in rows),
        "ebpo_shrinkage_last": last[-1]["ebpo_shrinkage_mean"] if last else None,
        "ebpo_prior_mean_last": last[-1]["ebpo_prior_mean"] if last else None,
    }


def _pct(value) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"


def _fmt(value, digits: int = 3) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def markdown_report(summaries: dict[str, dict], settings: dict, timings: dict, tail: int = 10) -> str:
    g, e = summaries.get("grpo"), summaries.get("ebpo")
    lines = [
        "# verl-ebpo demo: GRPO vs EBPO on CPU",
        "",
        f"verl's real trainer (`python -m verl.trainer.main_ppo`, V1, FSDP2 on CPU, `hf` rollout) trained the same "
        f"random tiny Llama ({settings['parameters']:,} parameters, character tokenizer) twice from seed "
        f"{settings['seed']} on the same data: once with `algorithm.adv_estimator=grpo`, once with `ebpo`.",
        "",
        f"Task: `n+1=` for n in 0..8; reward 1 if the first digit of the answer is n+1. "
        f"{settings['steps']} steps x {settings['batch_size']} prompts x G={settings['group_size']} answers "
        f"(max {settings['max_response_length']} tokens, temperature {settings['temperature']}), "
        f"lr {settings['lr']}, one on-policy update per step.",
        "",
        "| | GRPO | EBPO |",
        "|---|---|---|",
        f"| training reward, first {tail} steps | {_fmt(g and g['reward_first'])} | {_fmt(e and e['reward_first'])} |",
        f"| training reward, last {tail} steps | {_fmt(g and g['reward_last'])} | {_fmt(e and e['reward_last'])} |",
        f"| training reward, final step | {_fmt(g and g['reward_final_step'])} | {_fmt(e and e['reward_final_step'])} |",
        f"| greedy accuracy on the 9 questions, before / after | {_fmt(g and g['val_acc_before'], 2)} / "
        f"{_fmt(g and g['val_acc_after'], 2)} | {_fmt(e and e['val_acc_before'], 2)} / {_fmt(e and e['val_acc_after'], 2)} |",
        f"| groups with all answers wrong, first {tail} steps | {_fmt(g and g['all_fail_group_frac_first'])} | "
        f"{_fmt(e and e['all_fail_group_frac_first'])} |",
        f"| answers with advantage 0, first {tail} steps | {_fmt(g and g['zero_adv_frac_first'])} | "
        f"{_fmt(e and e['zero_adv_frac_first'])} |",
        f"| answers with advantage 0, last {tail} steps | {_fmt(g and g['zero_adv_frac_last'])} | "
        f"{_fmt(e and e['zero_adv_frac_last'])} |",
        f"| EBPO shrinkage S / prior mean at the end | | {_fmt(e and e['ebpo_shrinkage_last'])} / "
        f"{_fmt(e and e['ebpo_prior_mean_last'])} |",
        f"| mean step time (s) | {_fmt(g and g['step_time_s'], 2)} | {_fmt(e and e['step_time_s'], 2)} |",
        f"| wall time of the run incl. Ray start-up (s) | {_fmt(timings.get('grpo'), 0)} | {_fmt(timings.get('ebpo'), 0)} |",
        "",
    ]
    if g and e and g["reward_last"] is not None and e["reward_last"] is not None:
        diff = e["reward_last"] - g["reward_last"]
        if abs(diff) < 0.05:
            verdict = (
                f"Over the last {tail} steps the two runs end within {abs(diff):.3f} of each other: "
                "no difference this single run can resolve."
            )
        elif diff > 0:
            verdict = f"Over the last {tail} steps EBPO's training reward is higher by {diff:.3f}."
        else:
            verdict = f"Over the last {tail} steps GRPO's training reward is higher by {-diff:.3f}."
        lines += [
            "## What this shows",
            "",
            verdict + " This is one seed of each: rollouts are sampled, so a rerun gives a different curve; "
            "treat differences of a few points as noise.",
            "",
            f"In the first {tail} steps {_pct(g['all_fail_group_frac_first'])} (GRPO run) and "
            f"{_pct(e['all_fail_group_frac_first'])} (EBPO run) of the groups had all {settings['group_size']} answers "
            f"wrong. GRPO gives every answer of an all-equal group advantage 0: {_pct(g['zero_adv_frac_first'])} of its "
            f"answers then taught nothing. EBPO pulls each group's baseline toward the running prior mean, so the wrong "
            f"answers of all-wrong groups get a negative advantage: {_pct(e['zero_adv_frac_first'])} of its answers had "
            "advantage 0.",
            "",
        ]
    lines += [
        "## Files",
        "",
        "- `steps.csv`: per step and algorithm: reward, share of zero-advantage answers, share of all-equal and",
        "  all-wrong groups, EBPO's shrinkage S, prior mean, sigma2, tau2, step time.",
        "- `reward_curves.png`: both reward curves and the zero-advantage shares.",
        "- `summary.json`: the numbers above; `grpo/`, `ebpo/`: verl's metrics (`metrics.jsonl`), rollout dumps,",
        "  trainer log.",
        "",
        "GRPO's zero-advantage share is computed from verl's rollout dumps (answers in groups whose rewards are all",
        "equal); EBPO's is its own logged `ebpo/zero_adv_frac`.",
        "",
        f"Total demo wall time: {_fmt(timings.get('total'), 0)} s; peak memory of the whole process tree (Ray "
        f"included): {_fmt(timings.get('peak_pss_gib'), 2)} GiB PSS ({_fmt(timings.get('peak_rss_sum_gib'), 2)} GiB "
        "summing RSS, which counts shared pages once per process).",
    ]
    return "\n".join(lines) + "\n"
