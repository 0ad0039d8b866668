"""`verl-ebpo compare` refuses or reports what it cannot read: every metric line, every value, the run set,
the options, the outputs, and every field of an `--eval` row. Errors: one line on stderr, exit 2."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from verl_ebpo.tools.cli import main
from verl_ebpo.tools.compare import runs as runs_mod

T2 = 4.302652729749464  # t quantile 0.975 with 2 degrees of freedom


def _lines(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def _run(path: Path, scores, first: int = 1, val=None) -> Path:
    """A file-logger file: critic/score/mean and timing_s/step at steps first.., validation {step: acc}."""
    lines = [json.dumps({"step": s, "data": {"val-core/x/acc/mean@1": v}}) for s, v in (val or {}).items()]
    lines += [json.dumps({"step": first + i, "data": {"critic/score/mean": x, "timing_s/step": 1.0}})
              for i, x in enumerate(scores)]
    return _lines(path, lines)


def _compare(argv, out: Path, capsys) -> tuple[int, str, dict | None]:
    capsys.readouterr()
    rc = main(["compare", *argv, "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    doc = json.loads((out / "comparison.json").read_text()) if rc == 0 else None
    return rc, err, doc


def _one_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("verl-ebpo compare: error: "), lines
    assert "Traceback" not in err
    return lines[0]


# -- metric lines ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("line", ['{"step": 3.5, "data": {"critic/score/mean": 0.5}}', '{"step": true, "data": {}}',
                                  '{"step": -1, "data": {}}', '{"step": "3", "data": {}}', '{"step": 2, "data": [1, 2]}',
                                  '[1, 2]', '{"data": {}}'])
def test_a_metric_line_of_another_shape_is_one_error_naming_file_and_line(tmp_path, capsys, line):
    good = json.dumps({"step": 1, "data": {"critic/score/mean": 0.5}})
    path = _lines(tmp_path / "m.jsonl", [good, line])
    rc, err, _ = _compare(["--run", f"a@1={path}"], tmp_path / "out", capsys)
    assert rc == 2
    assert f'{path}:2: not a verl file-logger line {{"step": N, "data": {{...}}}}: {line[:20]}' in _one_error(err)
    assert not (tmp_path / "out").exists()


def test_values_that_are_not_finite_numbers_are_skipped_counted_and_reported_per_run_and_metric(tmp_path, capsys):
    bad = ["[1]", '{"a": 1}', "1" + "0" * 400, '"abc"', "Infinity", "true", "null", "1e400"]
    lines = [f'{{"step": {s}, "data": {{"critic/score/mean": {v}, "timing_s/step": 1.0}}}}'
             for s, v in enumerate(bad, 1)]
    lines += [json.dumps({"step": s, "data": {"critic/score/mean": 0.5, "timing_s/step": 1.0}}) for s in range(9, 14)]
    path = _lines(tmp_path / "m.jsonl", lines)
    rc, err, doc = _compare(["--run", f"a@1={path}", "--last", "5"], tmp_path / "out", capsys)
    assert rc == 0 and "Traceback" not in err
    warning = ("a@1: `critic/score/mean`: 8 values (not a number at steps 1, 2, 3, 4, 6; infinite at steps 5, 8; null "
               "(NaN or inf in verl's file logger) at step 7) skipped, not finite numbers")
    assert warning in err and warning in doc["notes"]
    assert warning in (tmp_path / "out" / "report.md").read_text()
    m = doc["algos"]["a"]["metrics"]["critic/score/mean"]
    assert m["per_seed"] == {"1": 0.5}
    assert doc["algos"]["a"]["steps"] == {"1": 13}  # the steps are still training steps (timing_s/step)


def test_nan_in_the_final_window_is_reported_and_never_replaced_by_earlier_steps(tmp_path, capsys):
    lines = [json.dumps({"step": s, "data": {"critic/score/mean": 0.1 * s}}) for s in range(1, 9)]
    lines += ['{"step": 9, "data": {"critic/score/mean": NaN}}', '{"step": 10, "data": {"critic/score/mean": null}}']
    path = _lines(tmp_path / "m.jsonl", lines)
    rc, err, doc = _compare(["--run", f"a@1={path}", "--last", "5"], tmp_path / "out", capsys)
    assert rc == 0
    # the window is steps 6..10: the mean of 0.6, 0.7, 0.8 (not of steps 4..8, the last five finite values)
    assert doc["algos"]["a"]["metrics"]["critic/score/mean"]["final_mean"] == pytest.approx(0.7)
    assert ("a@1: `critic/score/mean` was not a finite number in its final window (last 5 logged steps): 2 values "
            "(NaN at step 9; null (NaN or inf in verl's file logger) at step 10); final value over the other 3"
            ) in doc["notes"]


def test_a_nan_last_validation_names_run_and_metric_and_leaves_that_run_without_a_final_value(tmp_path, capsys):
    a1 = _run(tmp_path / "a1.jsonl", [0.5] * 3, val={0: 0.1, 3: 0.5})
    a2 = _run(tmp_path / "a2.jsonl", [0.5] * 3, val={0: 0.1, 3: 0.6})
    a3 = _lines(tmp_path / "a3.jsonl", [*_run(tmp_path / "x.jsonl", [0.5] * 3, val={0: 0.1, 2: 0.7}).read_text()
                                        .splitlines(), '{"step": 3, "data": {"val-core/x/acc/mean@1": NaN}}'])
    rc, err, doc = _compare(["--run", f"a@1={a1}", "--run", f"a@2={a2}", "--run", f"a@3={a3}"], tmp_path / "out",
                            capsys)
    assert rc == 0
    assert ("a@3: the last validation of `val-core/x/acc/mean@1` (step 3) is NaN, not a finite number: no final "
            "value for this run") in doc["notes"]
    val = doc["algos"]["a"]["metrics"]["val-core/x/acc/mean@1"]
    assert val["per_seed"] == {"1": 0.5, "2": 0.6}  # never a3's earlier validation (0.7)


# -- the run set -------------------------------------------------------------------------------------------------


def test_the_same_file_as_two_runs_is_refused(tmp_path, capsys):
    a = _run(tmp_path / "a.jsonl", [0.5] * 3)
    rc, err, _ = _compare(["--run", f"ebpo@1={a}", "--run", f"ebpo@2={a}"], tmp_path / "out", capsys)
    words = f"--run ebpo@2={a}: {a} is also read as ebpo@1 ({a}); one metrics file is one run"
    assert rc == 2 and words in _one_error(err)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "link.jsonl").symlink_to(a)  # also through a link inside a folder, under another algorithm
    rc, err, _ = _compare(["--run", f"ebpo@1={a}", "--run", f"grpo@1={tmp_path / 'd'}"], tmp_path / "out", capsys)
    assert rc == 2 and "is also read as ebpo@1" in _one_error(err)


def test_two_runs_under_one_seed_label_are_refused_but_a_resumed_run_is_merged(tmp_path, capsys):
    a = _run(tmp_path / "a.jsonl", [0.5] * 3)
    b = _run(tmp_path / "b.jsonl", [0.7] * 3)
    rc, err, _ = _compare(["--run", f"ebpo@1={a}", "--run", f"ebpo@1={b}"], tmp_path / "out", capsys)
    assert rc == 2 and f"{a} and {b} both start at step 1: two runs under one ALGO@SEED" in _one_error(err)
    resumed = _run(tmp_path / "c.jsonl", [0.9] * 3, first=3)
    rc, err, doc = _compare(["--run", f"ebpo@1={a}", "--run", f"ebpo@1={resumed}"], tmp_path / "out", capsys)
    assert rc == 0 and doc["algos"]["ebpo"]["steps"] == {"1": 5}


def test_disjoint_step_ranges_and_last_beyond_a_run_are_notes_in_the_report(tmp_path, capsys):
    a = _run(tmp_path / "a.jsonl", [0.5] * 30)
    b = _run(tmp_path / "b.jsonl", [0.7] * 30, first=100)
    rc, err, doc = _compare(["--run", f"a@1={a}", "--run", f"b@1={b}", "--last", "1000"], tmp_path / "out", capsys)
    assert rc == 0
    report = (tmp_path / "out" / "report.md").read_text()
    for note in ("the runs' step ranges do not all overlap (a@1 steps 1..30, b@1 steps 100..129)",
                 "--last 1000 is more than the logged steps of a@1 (30), b@1 (30): their final values are means over "
                 "the whole run"):
        assert any(n.startswith(note) for n in doc["notes"]) and note in report


def test_seeds_of_one_algorithm_without_a_common_step_draw_no_empty_legend(tmp_path, capsys):
    import warnings

    a1 = _run(tmp_path / "a1.jsonl", [0.5] * 3)
    a2 = _run(tmp_path / "a2.jsonl", [0.6] * 3, first=10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib's "No artists with labels found to put in legend"
        rc, err, doc = _compare(["--run", f"a@1={a1}", "--run", f"a@2={a2}"], tmp_path / "out", capsys)
    assert rc == 0 and (tmp_path / "out" / "training_reward.png").exists()
    assert any(n.startswith("the runs' step ranges do not all overlap (a@1 steps 1..3, a@2 steps 10..12)")
               for n in doc["notes"])


def test_metrics_that_match_nothing_are_refused_with_the_close_names(tmp_path, capsys):
    a = _run(tmp_path / "a.jsonl", [0.5] * 3)
    rc, err, _ = _compare(["--run", f"a@1={a}", "--metrics", "critic/scor/mean"], tmp_path / "out", capsys)
    assert rc == 2
    assert ("--metrics 'critic/scor/mean' matches no metric of any run; close: critic/score/mean"
            in _one_error(err))
    rc, err, _ = _compare(["--run", f"a@1={a}", "--metrics", "answers_generated"], tmp_path / "out", capsys)
    assert rc == 2 and "'answers_generated' matches no metric of any run: it needs --batch-size and --group-size" in err
    rc, err, doc = _compare(["--run", f"a@1={a}", "--metrics", "critic/*,timing_s/step"], tmp_path / "out", capsys)
    assert rc == 0 and set(doc["algos"]["a"]["metrics"]) == {"critic/score/mean", "timing_s/step"}


@pytest.mark.parametrize("out", ["", "   "])
def test_out_must_name_a_folder(tmp_path, capsys, monkeypatch, out):
    monkeypatch.chdir(tmp_path)
    a = _run(tmp_path / "a.jsonl", [0.5] * 3)
    capsys.readouterr()
    assert main(["compare", "--run", f"a@1={a}", "--out", out]) == 2
    assert "--out must name a folder, got '" in _one_error(capsys.readouterr().err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl"]


def test_a_rerun_removes_the_plots_it_no_longer_draws(tmp_path, capsys):
    out = tmp_path / "out"
    with_val = _run(tmp_path / "a.jsonl", [0.5] * 3, val={0: 0.1, 3: 0.5})
    assert _compare(["--run", f"a@1={with_val}"], out, capsys)[0] == 0
    assert (out / "validation_accuracy.png").exists()
    (out / "mine.png").write_text("keep")
    without = _run(tmp_path / "b.jsonl", [0.5] * 3)
    rc, _, _ = _compare(["--run", f"a@1={without}"], out, capsys)
    assert rc == 0
    assert sorted(p.name for p in out.iterdir()) == ["comparison.json", "mine.png", "report.md", "training_reward.png"]
    assert "validation_accuracy.png" not in (out / "report.md").read_text()


def test_clean_keeps_the_finite_numbers_and_says_what_each_other_value_was():
    clean, skipped = runs_mod.clean({1: {"a": 1.5, "b": [1], "c": True, "d": 10 ** 400, "e": 3},
                                     2: {"a": math.inf, "b": None, "c": math.nan}})
    assert clean == {1: {"a": 1.5, "e": 3.0}, 2: {}}
    assert skipped == {"b": {1: "not a number", 2: "null (NaN or inf in verl's file logger)"},
                       "c": {1: "not a number", 2: "NaN"}, "d": {1: "not a number"}, "a": {2: "infinite"}}


# -- --eval rows ------------------------------------------------------------------------------------------------


def _row(**fields) -> dict:
    return {"benchmark": "aime24", "problem_index": 0, "sample_index": 0, "ground_truth": "1",
            "response": "Answer: 1", **fields}


@pytest.mark.parametrize("fields, words", [
    ({"problem_index": None}, "field 'problem_index' must be an integer >= 0"),
    ({"problem_index": 1.5}, "field 'problem_index' must be an integer >= 0"),
    ({"problem_index": True}, "field 'problem_index' must be an integer >= 0"),
    ({"sample_index": -1}, "field 'sample_index' must be an integer >= 0"),
    ({"response": None}, "field 'response' must be a string"),
])
def test_an_eval_row_with_a_bad_field_is_one_error_naming_file_line_and_field(tmp_path, capsys, fields, words):
    gens = tmp_path / "g.jsonl"
    gens.write_text(json.dumps(_row(sample_index=1)) + "\n" + json.dumps(_row(**fields)) + "\n")
    rc, err, _ = _compare(["--eval", f"a@1={gens}"], tmp_path / "out", capsys)
    assert rc == 2
    line = _one_error(err)
    assert f"{gens}:2: {words}" in line, line
