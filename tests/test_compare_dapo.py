"""`verl-ebpo compare` never pairs DAPO's trained-on reward with another algorithm's: with the replay
buffer's `replay/discarded_*` metrics it reports the reward of all answers generated (hand-computed here); without
them the report says what DAPO's reward covers and points to validation accuracy."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from verl_ebpo.tools.cli import main

B, G = 2, 4  # 8 answers trained on per step
# DAPO, per step: (critic/score/mean over the 8 answers trained on, answers dropped, their reward sum)
DAPO_STEPS = [(0.5, 4, 4.0), (0.25, 8, 0.0), (0.75, 0, 0.0), (0.5, 4, 0.0)]
# all answers generated: (0.5*8 + 4)/12, (0.25*8 + 0)/16, 0.75, (0.5*8 + 0)/12
ALL = [8 / 12, 2 / 16, 0.75, 4 / 12]


def _write(path: Path, steps: list[dict]) -> Path:
    path.write_text("".join(json.dumps({"step": s, "data": d}) + "\n" for s, d in enumerate(steps, 1)))
    return path


def _dapo(path: Path, shift: float, discarded: bool = True) -> Path:
    steps = []
    for score, dropped, reward_sum in DAPO_STEPS:
        m = {"critic/score/mean": score + shift, "training/filter_groups/evicted_samples": dropped // G}
        if discarded:
            m |= {"replay/discarded_answers": dropped, "replay/discarded_reward_sum": reward_sum + shift * dropped}
        steps.append(m)
    return _write(path, steps)


def _grpo(path: Path, score: float) -> Path:
    return _write(path, [{"critic/score/mean": score} for _ in DAPO_STEPS])


def _compare(tmp_path: Path, discarded: bool, dapo_label: str = "dapo", sizes: bool = True) -> tuple[dict, str]:
    args = []
    for seed, shift in (("1", 0.0), ("2", 0.1)):
        args += ["--run", f"grpo@{seed}={_grpo(tmp_path / f'g{seed}.jsonl', 0.4 + shift)}",
                 "--run", f"{dapo_label}@{seed}={_dapo(tmp_path / f'd{seed}.jsonl', shift, discarded)}"]
    out = tmp_path / "out"
    sizes_args = ["--batch-size", str(B), "--group-size", str(G)] if sizes else []
    assert main(["compare", *args, *sizes_args, "--metric", "critic/score/mean,reward_all_answers", "--last", "4", "--out", str(out), "--quiet"]) == 0
    return json.loads((out / "comparison.json").read_text()), (out / "report.md").read_text()


def test_with_the_discarded_answers_dapo_is_compared_on_the_reward_of_all_answers_generated(tmp_path):
    doc, report = _compare(tmp_path, discarded=True)
    dapo = doc["algos"]["dapo"]["metrics"]
    seed1 = sum(ALL) / 4  # 0.46875
    # seed 2: every reward + 0.1 (trained-on and dropped alike), so its all-answer reward is seed 1's + 0.1
    assert dapo["reward_all_answers"]["per_seed"] == pytest.approx({"1": seed1, "2": seed1 + 0.1})
    assert dapo["critic/score/mean"]["per_seed"] == pytest.approx({"1": 0.5, "2": 0.6})  # verl's, as logged
    grpo = doc["algos"]["grpo"]["metrics"]["reward_all_answers"]
    assert grpo["per_seed"] == pytest.approx({"1": 0.4, "2": 0.5})  # = critic/score/mean: GRPO trains on all
    c = doc["comparisons"]["dapo-grpo"]
    assert "critic/score/mean" not in c  # never DAPO's kept-groups reward against GRPO's
    d = c["reward_all_answers"]
    assert d["diff"] == pytest.approx(seed1 - 0.4) and d["ci95"] == pytest.approx([seed1 - 0.4] * 2)
    assert "critic/score/mean" not in doc["comparisons_equal_budget"].get("dapo-grpo", {})
    assert any("dapo-grpo: `critic/score/mean` not compared" in n for n in doc["notes"])
    assert d["verdict"] in report


def test_without_them_the_report_says_what_dapos_reward_covers_and_recommends_validation_accuracy(tmp_path):
    doc, report = _compare(tmp_path, discarded=False)
    assert "reward_all_answers" not in doc["algos"]["dapo"]["metrics"]
    assert "dapo-grpo" not in doc["comparisons"]  # neither reward compared: nothing else was asked for (--metric)
    caveat = ("dapo@1, dapo@2: DAPO's `critic/score/mean` covers only the groups it kept, so it is not compared "
              "with other algorithms', and the reward of all its answers (`reward_all_answers`) is unknown")
    assert caveat in report and "compare validation accuracy (`val-core/*`) instead" in report


def test_a_dapo_run_is_recognised_by_its_group_filter_metrics_whatever_its_label(tmp_path):
    doc, _ = _compare(tmp_path, discarded=True, dapo_label="mine")
    assert "critic/score/mean" not in doc["comparisons"]["mine-grpo"]
    assert doc["algos"]["mine"]["metrics"]["reward_all_answers"]["per_seed"]["1"] == pytest.approx(sum(ALL) / 4)


def test_without_batch_and_group_size_the_all_answer_reward_is_not_guessed(tmp_path):
    doc, report = _compare(tmp_path, discarded=True, sizes=False)
    assert "reward_all_answers" not in doc["algos"]["dapo"]["metrics"]
    assert "needs --batch-size and --group-size" in report
    assert "dapo-grpo" not in doc["comparisons"] and "dapo-grpo: `critic/score/mean` not compared" in report


def test_two_dapo_runs_still_compare_their_trained_on_reward(tmp_path):
    args = []
    for seed, shift in (("1", 0.0), ("2", 0.1)):
        args += ["--run", f"dapo@{seed}={_dapo(tmp_path / f'a{seed}.jsonl', shift)}",
                 "--run", f"dapo_topic@{seed}={_dapo(tmp_path / f'b{seed}.jsonl', shift + 0.05)}"]
    out = tmp_path / "out"
    assert main(["compare", *args, "--batch-size", str(B), "--metric", "critic/score/mean,reward_all_answers", "--group-size", str(G), "--out", str(out), "--quiet"]) == 0
    c = json.loads((out / "comparison.json").read_text())["comparisons"]["dapo_topic-dapo"]
    assert c["critic/score/mean"]["diff"] == pytest.approx(0.05)
    assert c["reward_all_answers"]["diff"] == pytest.approx(0.05)
    assert not math.isnan(c["critic/score/mean"]["half_width"])
