"""The demo's task, reading verl's files back, and the results built from them (fake metrics files, no training)."""

import argparse
import csv
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest

from verl_ebpo.tools import cli
from verl_ebpo.tools import verl_logs
from verl_ebpo.tools.tiny import task
from verl_ebpo.tools.compare import plots
from verl_ebpo.tools.demo import DemoOptions, add_arguments, options_from_args, report
from verl_ebpo.tools.demo.options import ALGORITHMS, algorithms_table
from verl_ebpo.tools.stats import mean_ci, paired_diff_ci, verdict
from numeric import differences, text_differences  # tests/numeric.py: floats within a stated tolerance

REPO = Path(__file__).resolve().parents[1]


def owned_folders(out):  # what a demo re-run in `out` would delete
    from verl_ebpo.tools.demo.runner import MARKER_TOOL, OWNED
    from verl_ebpo.tools.folders import owned_subfolders

    return owned_subfolders(out, OWNED, MARKER_TOOL)


def claim_out_folder(out):  # the demo's claim on `out`, as run_demo makes it
    from verl_ebpo.tools.demo.runner import MARKER_TOOL, OWNED
    from verl_ebpo.tools.folders import claim_folder

    claim_folder(out, OWNED, MARKER_TOOL)
B, G = 4, 2  # prompts per step, answers per prompt in the fake runs


# -- the task ---------------------------------------------------------------------------------------------


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


def test_cpu_backend_never_imports_the_demo():
    for path in (REPO / "verl_ebpo" / "tools" / "cpu").glob("*.py"):
        text = path.read_text()
        assert "verl_ebpo.tools.demo" not in text and "from verl_ebpo.tools import demo" not in text, path.name


# -- verl's formats -----------------------------------------------------------------------------------------


def _metrics_file(path, steps):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for step, data in steps:
            f.write(json.dumps({"step": step, "data": data}) + "\n")
    return path


def _dump(folder, step, groups, prefix="u"):
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{step}.jsonl", "w") as f:
        for g, scores in enumerate(groups):
            for i, s in enumerate(scores):
                uid = f"{prefix}{g}-5f2a-{step}_{i}_0"
                f.write(json.dumps({"input": "q", "output": "a", "score": s, "step": step, "uid": uid}) + "\n")


def test_verl_logs_read_metrics_merges_a_steps_lines_and_names_a_bad_line(tmp_path):
    path = _metrics_file(tmp_path / "metrics.jsonl", [
        (0, {"val-core/s/acc/mean@1": 0.0}),
        (1, {"critic/score/mean": 0.25, "timing_s/step": 2.0, "timing_s/gen": 1.5}),
        (2, {"critic/score/mean": 0.5}),
        (2, {"val-core/s/acc/mean@1": 0.5, "val-core/t/acc/mean@1": 1.0}),
    ])
    metrics = verl_logs.read_metrics(path)
    assert metrics[2] == {"critic/score/mean": 0.5, "val-core/s/acc/mean@1": 0.5, "val-core/t/acc/mean@1": 1.0}
    assert verl_logs.validation_accuracy(metrics) == {0: 0.0, 2: 0.75}
    (tmp_path / "bad.jsonl").write_text('{"step": 1, "data": {}}\n{oops\n')
    with pytest.raises(ValueError, match="bad.jsonl:2: not a verl file-logger line"):
        verl_logs.read_metrics(tmp_path / "bad.jsonl")
    (tmp_path / "bad2.jsonl").write_text('{"data": {}}\n')
    with pytest.raises(ValueError, match="bad2.jsonl:1"):
        verl_logs.read_metrics(tmp_path / "bad2.jsonl")


def test_verl_logs_rollout_dump_uids_group_by_prompt(tmp_path):
    assert verl_logs.dump_group("0e14e621-e4a5-4f37-97b7-c46dfd736be0_3_0") == "0e14e621-e4a5-4f37-97b7-c46dfd736be0"
    assert verl_logs.dump_group("plain") == "plain"
    _dump(tmp_path / "r", 1, [[0, 0], [1, 0]])
    (tmp_path / "r" / "notes.jsonl").write_text("ignored\n")
    dumps = verl_logs.read_rollout_dumps(tmp_path / "r")
    assert list(dumps) == [1] and len(dumps[1]) == 4
    assert sorted(verl_logs.group_scores(dumps[1]).values()) == [[0.0, 0.0], [1.0, 0.0]]


# -- per-run series: known answers ----------------------------------------------------------------------------------


def test_run_series_grpo_counts_all_equal_groups_as_no_signal(tmp_path):
    metrics = verl_logs.read_metrics(_metrics_file(tmp_path / "m.jsonl", [
        (0, {"val-core/s/acc/mean@1": 0.0}),
        (1, {"critic/score/mean": 0.125, "timing_s/step": 2.0, "timing_s/gen": 1.0}),
        (2, {"critic/score/mean": 0.5, "timing_s/step": 4.0, "timing_s/gen": 2.0}),
        (2, {"val-core/s/acc/mean@1": 1 / 3}),
    ]))
    _dump(tmp_path / "r", 1, [[0, 0], [0, 0], [0, 0], [1, 0]])
    _dump(tmp_path / "r", 2, [[1, 1], [0, 0], [1, 0], [0, 1]])
    s = report.run_series("grpo", 0, metrics, verl_logs.read_rollout_dumps(tmp_path / "r"), B, G, wall_s=30.0)
    assert s.steps == 2 and s.answers.tolist() == [8, 8] and s.cum_answers.tolist() == [8, 16]
    assert s.reward.tolist() == [0.125, 0.5] and s.trained_reward.tolist() == [0.125, 0.5]
    assert s.no_signal.tolist() == [6 / 8, 4 / 8]
    assert s.step_time.tolist() == [2.0, 4.0]
    assert (s.greedy_before, s.greedy_after, s.wall_s) == (0.0, 1 / 3, 30.0)


def _dapo_step(score, evicted, surplus, dropped_reward):
    return {"critic/score/mean": score, "training/filter_groups/evicted_samples": evicted,
            "training/filter_groups/discarded_surplus_samples": surplus,
            verl_logs.DISCARDED_ANSWERS: (evicted + surplus) * G, verl_logs.DISCARDED_REWARD_SUM: dropped_reward,
            "timing_s/step": 1.0}


def test_run_series_dapo_counts_and_scores_every_answer_generated(tmp_path):
    # step 1: 4 groups trained (mean 0.5), 3 all-wrong groups evicted, 1 surplus group (rewards 1, 0) dropped
    metrics = {1: _dapo_step(0.5, 3, 1, 1.0), 2: _dapo_step(0.75, 0, 0, 0.0)}
    _dump(tmp_path / "r", 1, [[1, 0], [0, 1], [1, 0], [1, 0]])
    _dump(tmp_path / "r", 2, [[1, 1], [1, 0], [1, 0], [1, 1]])
    s = report.run_series("dapo", 0, metrics, verl_logs.read_rollout_dumps(tmp_path / "r"), B, G)
    assert s.answers.tolist() == [16, 8]
    assert s.reward.tolist() == [(0.5 * 8 + 1.0) / 16, 0.75]
    assert s.trained_reward.tolist() == [0.5, 0.75]
    assert s.no_signal.tolist() == [(0 + 8) / 16, 4 / 8]  # dropped answers taught nothing


def test_run_series_ebpo_takes_its_own_zero_advantage_share():
    metrics = {1: {"critic/score/mean": 0.25, "ebpo/zero_adv_frac": 0.0},
               2: {"critic/score/mean": 0.5, "ebpo/zero_adv_frac": 0.25}}
    s = report.run_series("ebpo", 1, metrics, {}, B, G)
    assert s.no_signal.tolist() == [0.0, 0.25] and s.answers.tolist() == [8, 8]
    assert math.isnan(s.step_time[0]) and s.greedy_after is None


# -- over seeds -------------------------------------------------------------------------------------------


def _series(algo, seed, rewards, answers=None, greedy=0.5):
    n = len(rewards)
    answers = np.full(n, float(B * G)) if answers is None else np.asarray(answers, dtype=float)
    return report.RunSeries(algo=algo, seed=seed, answers=answers, reward=np.asarray(rewards, dtype=float),
                            trained_reward=np.asarray(rewards, dtype=float), no_signal=np.full(n, 0.5),
                            step_time=np.full(n, 1.0),
                            greedy_before=0.0, greedy_after=greedy, wall_s=30.0 + n)


def _fake_runs():
    # 12 steps, tail 10: final reward = mean of steps 3..12
    runs = {"grpo": [], "dapo": [], "ebpo": []}
    for seed, shift in enumerate((0.0, 0.1, 0.2)):
        runs["grpo"].append(_series("grpo", seed, [0.1] * 2 + [0.3 + shift] * 10, greedy=0.3 + shift))
        runs["ebpo"].append(_series("ebpo", seed, [0.1] * 2 + [0.4 + shift + 0.01 * seed] * 10, greedy=0.5))
        # DAPO generates twice the answers from step 7 on: its budget window ends earlier
        answers = [B * G] * 6 + [2 * B * G] * 6
        runs["dapo"].append(_series("dapo", seed, [0.1] * 2 + [0.2] * 4 + [0.6 + shift] * 6, answers=answers,
                                    greedy=0.4))
    return runs


def test_summarize_gives_per_algorithm_numbers_and_comparisons_computed_by_stats():
    runs = _fake_runs()
    summary = report.summarize(runs)
    assert set(summary) >= {"algos", "comparisons"}
    for algo in runs:
        a = summary["algos"][algo]
        assert {"seeds", "final_reward_mean", "final_reward_ci95", "answers_generated", "greedy_accuracy_mean"} <= set(a)
        assert a["seeds"] == [0, 1, 2]
    grpo = summary["algos"]["grpo"]
    expected = mean_ci([0.3, 0.4, 0.5])
    assert grpo["final_reward_mean"] == pytest.approx(expected.mean)
    assert grpo["final_reward_ci95"] == pytest.approx(expected.as_list())
    assert grpo["answers_generated"] == 12 * B * G
    assert summary["algos"]["dapo"]["answers_generated"] == 18 * B * G
    assert grpo["greedy_accuracy_mean"] == pytest.approx(0.4)
    # DAPO's last 10 steps: 4 x 0.2 + 6 x (0.6 + shift)
    assert summary["algos"]["dapo"]["final_reward_per_seed"] == pytest.approx([0.44, 0.5, 0.56])
    # equal budget = GRPO's 96 answers; window = 10 plain steps = 80 answers: DAPO's steps ending at 24..88
    # answers (steps 3..9: 4 x 0.2 with 8 answers, 3 x (0.6 + shift) with 16 answers)
    assert summary["equal_budget_answers"] == 96
    dapo_budget = [(4 * 8 * 0.2 + 3 * 16 * (0.6 + s)) / (4 * 8 + 3 * 16) for s in (0.0, 0.1, 0.2)]
    assert summary["algos"]["dapo"]["final_reward_at_equal_budget_per_seed"] == pytest.approx(dapo_budget)
    assert summary["algos"]["grpo"]["final_reward_at_equal_budget_per_seed"] == pytest.approx([0.3, 0.4, 0.5])
    c = summary["comparisons"]["ebpo-grpo"]
    diff = paired_diff_ci([0.4, 0.51, 0.62], [0.3, 0.4, 0.5])
    assert c["diff"] == pytest.approx(diff.mean) and c["ci95"] == pytest.approx(diff.as_list())
    assert c["verdict"] == verdict("EBPO", "GRPO", diff, "final reward (mean of the last 10 steps)")
    assert "EBPO is higher than GRPO" in c["verdict"]
    assert set(summary["comparisons"]) == {"ebpo-grpo", "ebpo-dapo"}
    assert "not resolved" in summary["comparisons"]["ebpo-dapo"]["verdict"] or \
        "lower" in summary["comparisons"]["ebpo-dapo"]["verdict"]
    greedy = paired_diff_ci([0.5] * 3, [0.3, 0.4, 0.5])
    assert c["greedy_accuracy_diff"] == pytest.approx(greedy.mean)
    json.dumps(report.json_safe(summary), allow_nan=False)


def test_one_seed_gives_no_interval_and_says_so():
    runs = {a: [_series(a, 0, [0.2] * 10)] for a in ("grpo", "ebpo")}
    summary = report.summarize(runs)
    assert summary["algos"]["grpo"]["final_reward_ci95"] == [None, None]
    assert "one seed, no interval" in summary["comparisons"]["ebpo-grpo"]["verdict"]
    assert report.summarize({"grpo": runs["grpo"]})["comparisons"] == {}


def test_outputs_csv_plot_and_time_rows(tmp_path):
    runs = _fake_runs()
    summary = report.summarize(runs)
    rows = list(csv.DictReader(io.StringIO(report.steps_csv(runs))))
    assert len(rows) == 3 * 3 * 12
    dapo0 = [r for r in rows if r["algo"] == "dapo" and r["seed"] == "0"]
    assert dapo0[-1]["cum_answers"] == str(18 * B * G) and float(dapo0[-1]["reward_generated"]) == pytest.approx(0.6)
    report.plot(runs, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = report.time_rows(runs)
    assert table[0]["algo"] == "grpo" and table[0]["step_s"] == pytest.approx(1.0)
    assert table[0]["startup_s"] == pytest.approx(30.0)  # wall 42 s minus 12 steps of 1 s
    assert report.json_safe({"a": [math.nan, np.float64(1.5), np.int64(2)]}) == {"a": [None, 1.5, 2]}
    assert plots.smooth(np.array([1.0, 2.0, 3.0, 4.0]), 2).tolist() == [1.0, 1.5, 2.5, 3.5]


# -- options and command line -------------------------------------------------------------------------------------


def test_cli_options_follow_the_spec():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    default = options_from_args(parser.parse_args([]))
    assert default == DemoOptions()
    assert default.algos == ("grpo", "dapo", "ebpo") and default.seed_list == [0, 1, 2] and default.steps == 60
    opts = options_from_args(parser.parse_args(["--algos", "ebpo, DrGRPO", "--seeds", "2", "--steps", "8",
                                                "--batch-size", "16", "--out", "x"]))
    assert opts.algos == ("ebpo", "drgrpo") and opts.seed_list == [0, 1] and opts.batch_size == 16
    assert options_from_args(parser.parse_args(["--quick"])).seed_list == [0]
    assert opts.train_rows >= 4 * 16 * 8
    for algo in ALGORITHMS:
        assert any(o.startswith("algorithm.adv_estimator=") for o in opts.overrides(algo))
    assert "algorithm.filter_groups.enable=True" in DemoOptions().overrides("dapo")
    assert "actor_rollout_ref.actor.clip_ratio_high=0.28" in DemoOptions().overrides("dapo")


@pytest.mark.parametrize("argv, message", [
    (["--algos", "grpo,ppo"], "algos must be a comma-separated list"),
    (["--seeds", "0"], "seeds must be a whole number in [1, 1000]"),
    (["--steps", "1.5"], "steps must be a whole number"),
    (["--group-size", "1"], "group_size must be a whole number in [2, 64]"),
])
def test_cli_refuses_bad_options_in_one_line(argv, message, capsys):
    assert cli.main(["demo", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("verl-ebpo demo: error: ") and message in err and len(err.strip().splitlines()) == 1


def test_docs_show_the_option_and_algorithm_tables():
    doc = (REPO / "docs" / "demo.md").read_text()
    assert DemoOptions.markdown_table(key_header="option") in doc
    assert algorithms_table() in doc


def test_plot_band_is_mean_ci_per_step_over_seeds_with_gaps_where_unknown():
    curves = np.array([[0.1, 0.2, 0.5, np.nan], [0.3, 0.2, 0.9, 0.4], [0.2, 0.5, 0.4, 0.4]])  # (seeds, steps)
    mean, lo, hi = plots.band(curves)
    for k in range(3):
        ci = mean_ci(curves[:, k])
        assert (mean[k], lo[k], hi[k]) == pytest.approx((ci.mean, ci.lo, ci.hi), rel=1e-12)
    assert np.isnan([mean[3], lo[3], hi[3]]).all()  # a share verl did not log for one seed: a gap, not a guess
    mean, lo, hi = plots.band(curves[:1, :3])
    assert mean.tolist() == [0.1, 0.2, 0.5] and np.isnan(lo).all() and np.isnan(hi).all()  # one seed: no band


# -- the output folder: the demo deletes only what it provably made ---------------------------------------------


def test_owned_folders_of_a_new_empty_or_unrelated_folder_are_none(tmp_path):
    assert owned_folders(tmp_path / "new") == []
    assert owned_folders(tmp_path) == []
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "data").mkdir()
    assert owned_folders(tmp_path) == []


@pytest.mark.parametrize("present", [("runs",), ("assets",), ("runs", "assets")])
def test_demo_refuses_runs_or_assets_it_did_not_make_and_touches_nothing(tmp_path, present):
    from verl_ebpo.tools.folders import MARKER, FolderNotOurs

    for name in present:
        (tmp_path / name / "sub").mkdir(parents=True)
        (tmp_path / name / "sub" / "precious.txt").write_text("keep")
    for check in (owned_folders, claim_out_folder):
        with pytest.raises(FolderNotOurs) as info:
            check(tmp_path)
        message = str(info.value)
        assert len(message.splitlines()) == 1 and MARKER in message and "choose a new or empty folder" in message
        assert all(f"{name}/" in message for name in present)
    for name in present:
        assert (tmp_path / name / "sub" / "precious.txt").read_text() == "keep"
    assert not (tmp_path / MARKER).exists()


def test_claim_writes_the_marker_and_a_rerun_replaces_only_the_demos_own_folders(tmp_path):
    from verl_ebpo import __version__
    from verl_ebpo.tools.folders import MARKER

    out = tmp_path / "demo"
    claim_out_folder(out)
    assert json.loads((out / MARKER).read_text()) == {"tool": "verl-ebpo demo", "version": __version__,
                                                      "owns": ["runs", "assets"]}
    (out / "runs" / "grpo" / "seed0").mkdir(parents=True)
    (out / "runs" / "grpo" / "seed0" / "metrics.jsonl").write_text("{}\n")
    (out / "assets" / "seed0").mkdir(parents=True)
    (out / "notes.txt").write_text("mine")
    assert owned_folders(out) == [out / "runs", out / "assets"]
    claim_out_folder(out)
    assert sorted(p.name for p in out.iterdir()) == sorted([MARKER, "notes.txt"])
    assert (out / "notes.txt").read_text() == "mine"


def test_only_the_demos_own_plain_marker_proves_ownership(tmp_path):
    from verl_ebpo.tools.folders import MARKER, FolderNotOurs

    claim_out_folder(tmp_path / "ours")
    good = (tmp_path / "ours" / MARKER).read_text()
    for i, make in enumerate([
        lambda m: m.write_text(json.dumps({"tool": "someone else", "version": "1"})),
        lambda m: m.write_text("not json"),
        lambda m: m.write_text("[1, 2]"),
        lambda m: m.mkdir(),
        lambda m: m.symlink_to(tmp_path / "ours" / MARKER),  # a link to a real marker: not this folder's
    ]):
        out = tmp_path / f"case{i}"
        (out / "runs").mkdir(parents=True)
        make(out / MARKER)
        with pytest.raises(FolderNotOurs):
            owned_folders(out)
        assert (out / "runs").is_dir()
    out = tmp_path / "linked_runs"  # the marker is ours, but runs/ is a link to somewhere else: left alone
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "precious.txt").write_text("keep")
    out.mkdir()
    (out / MARKER).write_text(good)
    (out / "runs").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(FolderNotOurs, match="not a plain folder"):
        claim_out_folder(out)
    assert (tmp_path / "elsewhere" / "precious.txt").read_text() == "keep"


def test_cli_demo_into_a_folder_it_did_not_make_stops_in_one_line_before_any_work(tmp_path, capsys, monkeypatch):
    from verl_ebpo.tools.demo import runner

    def no_work(*args, **kwargs):
        raise AssertionError("the demo started working in a folder it does not own")

    monkeypatch.setattr(runner, "build_assets", no_work)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "precious.txt").write_text("keep")
    assert cli.main(["demo", "--out", str(tmp_path), "--quick", "--steps", "1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("verl-ebpo demo: error: --out ") and "did not make" in err and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err
    assert (tmp_path / "runs" / "precious.txt").read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]


def test_demo_report_through_compare_gives_the_numbers_of_the_old_report_code():
    """tests/data/demo_report_before_compare.json: the old demo report code's output on `_fake_runs()` (summary,
    steps.csv, time rows), written before its statistics moved into verl-ebpo compare."""
    ref = json.loads((Path(__file__).parent / "data" / "demo_report_before_compare.json").read_text())
    runs = _fake_runs()
    summary = report.summarize(runs)
    rows = report.time_rows(runs)
    # re-computed floats against a file one machine wrote: within tests/numeric.py's tolerance, labels exactly
    assert differences(report.json_safe(summary), ref["summary"]) == []
    assert text_differences(report.steps_csv(runs), ref["steps_csv"]) == []
    assert differences(report.json_safe(rows), ref["time_rows"]) == []
    # numbers written in (the same as in the reference file)
    assert ref["summary"]["comparisons"]["ebpo-grpo"]["ci95"] == pytest.approx([0.08515862288249673, 0.13484137711750338])
    assert ref["summary"]["algos"]["dapo"]["final_reward_at_equal_budget_per_seed"] == pytest.approx([0.44, 0.5, 0.56])


def test_greedy_accuracy_interval_is_clipped_to_0_1():
    runs = {"grpo": [_series("grpo", s, [0.2] * 10, greedy=g) for s, g in enumerate((0.0, 0.0, 1 / 9))]}
    a = report.summarize(runs)["algos"]["grpo"]
    raw = mean_ci([0.0, 0.0, 1 / 9]).as_list()
    assert raw[0] < 0 and a["greedy_accuracy_ci95"] == pytest.approx([0.0, raw[1]])


# -- scheduling and progress (no trainer: jobs and metrics files written by hand) -----------------------------------


def test_runs_start_longest_first_and_the_estimate_spreads_them_over_the_lanes():
    from verl_ebpo.tools.demo.runner import Job, schedule

    o = DemoOptions(steps=10, parallel=2, seeds=2)
    jobs = [Job(a, s, Path(f"/x/{a}{s}")) for s in (0, 1) for a in ("grpo", "dapo", "ebpo")]
    order = schedule(o, jobs)
    assert [j.algo for j in order] == ["dapo", "dapo", "grpo", "ebpo", "grpo", "ebpo"]  # ties keep seed order
    assert [j.seed for j in order] == [0, 1, 0, 0, 1, 1]
    # by hand: runs of 78 + 10 x (0.25 + 0.023 x 64) = 95.22 s (GRPO, EBPO) and 78 + 10 x 1.722 x 3.4 = 136.548 s
    # (DAPO); longest first on 2 lanes, both busy all along: (136.548 + 2 x 95.22) x 1.4, plus 30 s of overhead
    seconds, nbytes = o.cost_estimate()
    assert seconds == pytest.approx((136.548 + 2 * 95.22) * 1.4 + 30)
    assert DemoOptions(steps=10, parallel=1, seeds=2).cost_estimate()[0] == pytest.approx(2 * 136.548 + 4 * 95.22 + 30)
    assert nbytes == pytest.approx(2 * 4.6 * 2**30 + 2048 * o.train_rows)
    # --quick's lanes end apart: DAPO alone on one, GRPO then EBPO on the other. Both run at 1/1.4 until DAPO's
    # 136.548 s of work is done (191.17 s), then EBPO's last 190.44 - 136.548 = 53.892 s alone at full speed
    quick = DemoOptions(steps=10, quick=True)
    assert quick.cost_estimate()[0] == pytest.approx(136.548 * 1.4 + 53.892 + 30)


def test_time_left_weighs_finished_and_running_runs_by_their_estimates(tmp_path):
    from verl_ebpo.tools.demo.runner import Job, steps_done, steps_logged, time_left

    o = DemoOptions(steps=10, parallel=1, algos="grpo,ebpo", seeds=1)
    jobs = [Job("grpo", 0, tmp_path / "g"), Job("ebpo", 0, tmp_path / "e")]
    # nothing logged yet: the demo's own estimate minus the time spent (2 runs of 95.22 s + 30 s)
    assert time_left(o, jobs, 10.0, {}) == pytest.approx(2 * 95.22 + 30 - 10.0)
    assert time_left(o, jobs, 300.0, {}) is None  # past the estimate with nothing logged: not known
    # GRPO done: half the work (two equal runs) took 100 s, so 100 s are left
    jobs[0].wall_s = 100.0
    assert time_left(o, jobs, 100.0, {}) == pytest.approx(100.0)
    # EBPO logged 5 of 10 steps: done = 95.22 + 78 + 5 x 1.722
    done = 95.22 + 78 + 5 * 1.722
    assert time_left(o, jobs, 130.0, {("ebpo", 0): 5}) == pytest.approx(130.0 * (2 * 95.22 - done) / done)
    # the bar counts steps: a finished run all of its steps, a running one those it logged
    assert steps_logged(o, jobs, {("ebpo", 0): 5}) == 15
    # steps_done reads verl's metrics file (steps with a score), 0 when there is none yet
    assert steps_done(jobs[1]) == 0
    jobs[1].run_dir.mkdir()
    (jobs[1].run_dir / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "data": {verl_logs.SCORE: 0.5}}) + "\n" for s in (1, 2, 3)))
    assert steps_done(jobs[1]) == 3


def test_lanes_run_every_job_once_a_cluster_each_and_a_failure_stops_the_rest(tmp_path, monkeypatch):
    """`_run_lanes` with verl replaced by stand-ins: each lane starts one cluster and runs jobs one at a time;
    a failed run stops the other lane's run and its error (not the stop) reaches the caller."""
    import contextlib
    import threading
    import time as _time

    from verl_ebpo.tools.cpu import launch
    from verl_ebpo.tools.demo import runner

    clusters, ran, running, peak = [], [], [0], [0]
    lock = threading.Lock()

    @contextlib.contextmanager
    def fake_cluster():
        clusters.append(threading.current_thread().name)
        yield f"127.0.0.1:{len(clusters)}", {"RAY_AUTH_TOKEN": str(len(clusters))}

    def fake_run(run, timeout_s, stop):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        try:
            if "fail" in run.out_dir:
                raise launch.TrainerFailed("verl trainer exited with 1")
            for _ in range(100):
                if stop.is_set():
                    raise launch.TrainerStopped("stopped")
                _time.sleep(0.002 if "slow" not in run.out_dir else 0.05)
            ran.append((run.out_dir, run.ray_address, run.ray_env["RAY_AUTH_TOKEN"]))
            return 1.0
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(launch, "ray_cluster", fake_cluster)
    monkeypatch.setattr(launch, "run_main_ppo", fake_run)
    o = DemoOptions(steps=2, parallel=2, quiet=True)
    assets_ = {0: {"model": "m", "train": "t", "val": "v"}}
    jobs = [runner.Job("grpo", 0, tmp_path / f"job{i}") for i in range(5)]
    progress = runner._Progress(o, jobs, _time.time())
    runner._run_lanes(o, jobs, assets_, progress, _time.time())
    assert len(clusters) == 2 and peak[0] == 2
    assert sorted(r[0] for r in ran) == sorted(str(j.run_dir) for j in jobs)  # each job once
    assert all(j.wall_s == 1.0 for j in jobs)
    assert all((addr[-1] == token) for _, addr, token in ran)  # a run joins its lane's cluster with its token
    ran.clear()
    jobs = [runner.Job("grpo", 0, tmp_path / "slow0"), runner.Job("grpo", 0, tmp_path / "fail1"),
            runner.Job("grpo", 0, tmp_path / "slow2")]
    with pytest.raises(launch.TrainerFailed, match="exited with 1"):
        runner._run_lanes(o, jobs, assets_, runner._Progress(o, jobs, _time.time()), _time.time())
    assert not ran and jobs[2].wall_s is None  # the slow run was stopped, the third never started


def test_one_ebpo_run_keeps_its_last_checkpoint_and_the_others_none():
    """`verl-ebpo inspect` has a checkpoint to read after a demo: EBPO's first seed saves its last step
    only (one kept); no other run saves any (the CPU runs' default is save_freq=-1)."""
    from verl_ebpo.tools.demo.runner import Job, checkpoint_overrides, make_run

    o = DemoOptions(steps=7, seeds=2)
    assert o.checkpoint_run == ("ebpo", 0) and DemoOptions(algos="grpo,dapo").checkpoint_run is None
    info = {"model": "m", "train": "t", "val": "v"}
    for algo, seed in (("ebpo", 0), ("ebpo", 1), ("grpo", 0), ("dapo", 0)):
        job = Job(algo, seed, Path(f"/x/{algo}{seed}"))
        keys = [k for k in make_run(o, job, info, None).overrides() if k.startswith(("trainer.save_freq=",
                                                                                      "trainer.max_actor_ckpt"))]
        if (algo, seed) == ("ebpo", 0):
            assert keys == ["trainer.save_freq=7", "trainer.max_actor_ckpt_to_keep=1"]
        else:
            assert keys == ["trainer.save_freq=-1"] and checkpoint_overrides(o, job) == []


@pytest.mark.parametrize("fmt, magic", [("png", b"\x89PNG"), ("pdf", b"%PDF"), ("svg", b"<?xml")])
def test_demo_figure_in_each_format_with_its_caption(tmp_path, fmt, magic):
    """The demo's figure (--figure-format) as PNG at 150 dpi, PDF or SVG; the SVG's text states the smoothing,
    the seeds and the band's clipping."""
    path = tmp_path / f"curves.{fmt}"
    report.plot(_fake_runs(), path)
    data = path.read_bytes()
    assert data[:len(magic)] == magic
    if fmt == "svg":
        text = " ".join(data.decode().split())
        for words in ("moving average over 5 logged steps", "3 seeds", "clipped to [0, 1]"):
            assert all(w in text for w in words.split()), words
    assert DemoOptions(figure_format=fmt).figure_format == fmt
    with pytest.raises(ValueError):
        DemoOptions(figure_format="jpg")


@pytest.mark.parametrize("error, code", [("failed", 2), ("bad option", 2), ("interrupted", 130)])
def test_demo_exits_as_the_cli_convention_says_with_one_line(tmp_path, capsys, monkeypatch, error, code):
    """0 done, 2 refused or failed (a failed verl run too, no longer 1), 130 interrupted: one line on stderr."""
    from verl_ebpo.tools.cpu.launch import TrainerFailed
    from verl_ebpo.tools.demo import runner

    def stop(options):
        raise {"failed": TrainerFailed("verl trainer exited with 1\nits log's last lines"),
               "bad option": ValueError("--out x: not a folder"), "interrupted": KeyboardInterrupt()}[error]

    monkeypatch.setattr(runner, "run_demo", stop)
    assert cli.main(["demo", "--quick", "--quiet", "--out", str(tmp_path)]) == code
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("verl-ebpo demo: ") and "Traceback" not in err
