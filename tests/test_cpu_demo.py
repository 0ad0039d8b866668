"""The demo's task and its report (reading verl's file logger and rollout dumps back), without training."""

import argparse
import csv
import json

import pytest

from verl_ebpo.demo import DEFAULTS, add_arguments, report, task


def test_task_scores_the_first_digit():
    assert task.compute_score("s", "7", "7") == 1.0
    assert task.compute_score("s", "x7yz", "7") == 1.0
    assert task.compute_score("s", "a87", "7") == 0.0  # the first digit counts
    assert task.compute_score("s", "seven", "7") == 0.0
    assert task.compute_score("s", "", "7") == 0.0
    assert task.compute_score("s", None, 7) == 0.0


def test_task_rows_are_seeded_and_correct():
    rows = task.make_rows(50, seed=4)
    assert rows == task.make_rows(50, seed=4) and rows != task.make_rows(50, seed=5)
    for row in rows:
        n = row["extra_info"]["operand"]
        assert row["prompt"] == [{"role": "user", "content": f"{n}+1="}]
        assert row["reward_model"]["ground_truth"] == str(n + 1)
    assert [r["reward_model"]["ground_truth"] for r in task.validation_rows()] == [str(i) for i in range(1, 10)]


def _dump(folder, step, groups):
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{step}.jsonl", "w") as f:
        for g, scores in enumerate(groups):
            for i, s in enumerate(scores):
                f.write(json.dumps({"input": "q", "output": "a", "score": s, "step": step, "uid": f"u{g}-x_{i}_0"}) + "\n")


def test_group_stats_known_answer():
    answers = [{"uid": f"a_{i}_0", "score": s} for i, s in enumerate([0, 0, 0, 0])]
    answers += [{"uid": f"b_{i}_0", "score": s} for i, s in enumerate([1, 0, 0, 1])]
    answers += [{"uid": f"c_{i}_0", "score": s} for i, s in enumerate([1, 1, 1, 1])]
    stats = report.group_stats(answers)
    assert stats["reward"] == pytest.approx(6 / 12)
    assert stats["zero_adv_frac_grpo"] == pytest.approx(8 / 12)  # groups a and c
    assert stats["equal_reward_group_frac"] == pytest.approx(2 / 3)
    assert stats["all_fail_group_frac"] == pytest.approx(1 / 3)
    assert report.group_key("1f-2a_3_0") == "1f-2a"
    assert report.group_stats([]) == {}


def test_step_rows_take_grpo_zero_share_from_dumps_and_ebpo_from_its_log(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text(
        json.dumps({"step": 0, "data": {"val-core/s/acc/mean@1": 0.0}}) + "\n"
        + json.dumps({"step": 1, "data": {"critic/score/mean": 0.25, "timing_s/step": 2.0}}) + "\n"
        + json.dumps({"step": 2, "data": {"critic/score/mean": 0.5, "ebpo/zero_adv_frac": 0.1,
                                          "ebpo/shrinkage_mean": 0.4}}) + "\n"
        + json.dumps({"step": 2, "data": {"val-core/s/acc/mean@1": 0.5}}) + "\n"
    )
    _dump(tmp_path / "rollouts", 1, [[0, 0], [1, 0]])
    _dump(tmp_path / "rollouts", 2, [[1, 1], [0, 0]])
    loaded = report.load_metrics(metrics)
    assert loaded[2]["val-core/s/acc/mean@1"] == 0.5 and loaded[2]["critic/score/mean"] == 0.5
    assert report.validation_accuracy(loaded) == {0: 0.0, 2: 0.5}
    rollouts = report.load_rollouts(tmp_path / "rollouts")
    grpo = report.step_rows("grpo", loaded, rollouts)
    assert [r["zero_adv_frac"] for r in grpo] == [0.5, 1.0]
    assert [r["all_fail_group_frac"] for r in grpo] == [0.5, 0.5]
    ebpo = report.step_rows("ebpo", loaded, {})
    assert [r["zero_adv_frac"] for r in ebpo] == [None, 0.1]
    summary = report.summarize("grpo", grpo, loaded, tail=1)
    assert summary["reward_first"] == 0.25 and summary["reward_last"] == 0.5
    assert summary["val_acc_before"] == 0.0 and summary["val_acc_after"] == 0.5
    with pytest.raises(ValueError, match="metrics.jsonl:1: not JSON"):
        (tmp_path / "bad").mkdir()
        (tmp_path / "bad" / "metrics.jsonl").write_text("{oops\n")
        report.load_metrics(tmp_path / "bad" / "metrics.jsonl")


def test_moving_average_and_outputs(tmp_path):
    assert report.moving_average([1, 2, 3, 4], 2) == [1, 1.5, 2.5, 3.5]
    rows = {
        a: [
            {"algorithm": a, "step": s, "reward": 0.1 * s, "zero_adv_frac": 0.5, "equal_reward_group_frac": 0.5,
             "all_fail_group_frac": 0.4, "ebpo_shrinkage_mean": None, "ebpo_prior_mean": None, "ebpo_sigma2": None,
             "ebpo_tau2": None, "step_time_s": 1.0}
            for s in range(1, 6)
        ]
        for a in ("grpo", "ebpo")
    }
    path = report.write_csv(rows["grpo"] + rows["ebpo"], tmp_path / "steps.csv")
    read = list(csv.DictReader(open(path)))
    assert len(read) == 10 and read[0]["ebpo_prior_mean"] == "" and float(read[4]["reward"]) == pytest.approx(0.5)
    png = report.plot(rows, tmp_path / "curves.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summaries = {a: report.summarize(a, r, {}, tail=2) for a, r in rows.items()}
    text = report.markdown_report(
        summaries,
        {"parameters": 83008, "seed": 0, "steps": 5, "batch_size": 4, "group_size": 4, "max_response_length": 4,
         "temperature": 1.0, "lr": 0.005},
        {"grpo": 60.0, "ebpo": 61.0, "total": 125.0, "peak_pss_gib": 3.2, "peak_rss_sum_gib": 5.0},
        tail=2,
    )
    assert "| training reward, last 2 steps | 0.450 | 0.450 |" in text
    assert "no difference this single run can resolve" in text
    assert "3.20 GiB PSS" in text


def test_cli_arguments_default_to_the_documented_job():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args([])
    assert (args.steps, args.batch_size, args.group_size, args.out) == (
        DEFAULTS["steps"], DEFAULTS["batch_size"], 4, "runs/demo")
    assert parser.parse_args(["--steps", "3", "--algorithms", "ebpo"]).algorithms == "ebpo"
