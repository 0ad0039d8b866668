"""`verl-ebpo compare` on metrics files and generations built with known answers (hand-computed numbers)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import t as student_t

from verl_ebpo.tools.cli import main
from verl_ebpo.tools.compare import runs as runs_mod
from verl_ebpo.tools.stats import crossed_mean_ci, mean_ci

T2 = 4.302652729749464  # t quantile 0.975 with 2 degrees of freedom
B, G = 2, 4  # 8 answers trained on per step
SHIFTS = {"1": 0.0, "2": 0.1, "3": 0.2}


def _write(path: Path, steps: dict[int, dict], extra_lines=()) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"step": s, "data": d}) for s, d in steps.items()] + list(extra_lines)
    path.write_text("\n".join(lines) + "\n")
    return path


def _steps(scores, val=None, extra=None):
    """step -> metrics: critic/score/mean per step, validation at 0 and at the last step."""
    out = {0: {"val-core/x/acc/mean@1": 0.0}}
    for i, score in enumerate(scores, 1):
        out[i] = {"critic/score/mean": score, "timing_s/step": 1.0, **((extra or {}).get(i, {}))}
    if val is not None:
        out[len(scores)] = {**out[len(scores)], "val-core/x/acc/mean@1": val}
    return out


def _three_algos(folder: Path) -> list[str]:
    """GRPO: final [0.3, 0.4, 0.5]; EBPO: [0.4, 0.51, 0.62] (ebpo/zero_adv_frac 0.25); DAPO: one group of 4
    answers dropped at each of steps 1..6 (12 answers there, 8 after), final [0.44, 0.5, 0.56]."""
    args = []
    for seed, s in SHIFTS.items():
        i = int(seed) - 1
        grpo = _steps([0.1] * 2 + [0.3 + s] * 10, val=0.3 + s)
        ebpo = _steps([0.1] * 2 + [0.4 + s + 0.01 * i] * 10, val=0.5,
                      extra={k: {"ebpo/zero_adv_frac": 0.25} for k in range(1, 13)})
        dapo = _steps([0.1] * 2 + [0.2] * 4 + [0.6 + s] * 6, val=0.4,
                      extra={k: {"training/filter_groups/evicted_samples": 1} for k in range(1, 7)})
        for algo, steps in (("grpo", grpo), ("dapo", dapo), ("ebpo", ebpo)):
            args += ["--run", f"{algo}@{seed}={_write(folder / f'{algo}{seed}.jsonl', steps)}"]
    return args


@pytest.fixture
def three(tmp_path):
    out = tmp_path / "out"
    rc = main(["compare", *_three_algos(tmp_path / "in"), "--metric", "critic/score/mean,reward_all_answers,val-core/*", "--batch-size", str(B), "--group-size", str(G),
               "--out", str(out), "--quiet"])
    assert rc == 0
    return json.loads((out / "comparison.json").read_text()), out


def test_finals_intervals_and_paired_differences_by_hand(three):
    doc, out = three
    grpo = doc["algos"]["grpo"]["metrics"]["critic/score/mean"]
    assert doc["algos"]["grpo"]["seeds"] == ["1", "2", "3"] and grpo["n"] == 3
    assert grpo["final_mean"] == pytest.approx(0.4)
    half = T2 * 0.1 / math.sqrt(3)  # sd of [0.3, 0.4, 0.5] = 0.1
    assert grpo["ci95"] == pytest.approx([0.4 - half, 0.4 + half])
    assert doc["algos"]["dapo"]["metrics"]["critic/score/mean"]["per_seed"] == pytest.approx(
        {"1": 0.44, "2": 0.5, "3": 0.56})
    c = doc["comparisons"]["ebpo-grpo"]["critic/score/mean"]
    half = T2 * 0.01 / math.sqrt(3)  # differences [0.1, 0.11, 0.12]
    assert c["diff"] == pytest.approx(0.11) and c["ci95"] == pytest.approx([0.11 - half, 0.11 + half])
    assert c["n"] == 3 and c["half_width"] == pytest.approx(half) and "EBPO is higher than GRPO" in c["verdict"]
    # default pairs: each pair once, the later-listed algorithm minus the earlier one
    assert set(doc["comparisons"]) == {"dapo-grpo", "ebpo-grpo", "ebpo-dapo"}
    # validation: the last validation of each run
    val = doc["comparisons"]["ebpo-grpo"]["val-core/x/acc/mean@1"]
    assert val["diff"] == pytest.approx(0.1) and val["ci95"] == pytest.approx([0.1 - T2 * 0.1 / math.sqrt(3),
                                                                                0.1 + T2 * 0.1 / math.sqrt(3)])
    assert doc["number_of_comparisons"] == sum(len(v) for k in ("comparisons", "comparisons_equal_budget")
                                               for v in doc[k].values())
    text = (out / "report.md").read_text()
    assert c["verdict"] in text and f"{doc['number_of_comparisons']} comparisons" in text
    for png in ("training_reward.png", "validation_accuracy.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"


def test_dapo_dropped_groups_count_as_answers_generated_and_equal_budget(three):
    doc, _ = three
    answers = doc["algos"]["dapo"]["metrics"]["answers_generated"]
    assert answers["per_seed"] == {"1": 120.0, "2": 120.0, "3": 120.0}  # 6 x 12 + 6 x 8
    assert doc["algos"]["grpo"]["metrics"]["answers_generated"]["final_mean"] == 96
    # share without learning signal: DAPO's dropped 4 of 12 on steps 1..6 (last 10 steps: 4 x 1/3 + 6 x 0);
    # EBPO its own zero-advantage share; GRPO's is not in verl's metrics (reported missing)
    assert doc["algos"]["dapo"]["metrics"]["no_signal_share"]["final_mean"] == pytest.approx(4 / 30)
    assert doc["algos"]["ebpo"]["metrics"]["no_signal_share"]["final_mean"] == pytest.approx(0.25)
    assert "no_signal_share" not in doc["algos"]["grpo"]["metrics"]
    assert any("`no_signal_share` is missing from grpo@1, grpo@2, grpo@3" in n for n in doc["notes"])
    # equal budget 96 answers, window 10 x 8: DAPO's steps 2..9 end at 24..96 answers
    assert doc["equal_budget_answers"] == 96
    at = doc["algos"]["dapo"]["metrics"]["critic/score/mean"]["at_equal_budget"]["per_seed"]
    assert at == pytest.approx({s: (12 * 0.1 + 48 * 0.2 + 24 * (0.6 + x)) / 84 for s, x in SHIFTS.items()})
    assert doc["algos"]["grpo"]["metrics"]["critic/score/mean"]["at_equal_budget"]["final_mean"] == pytest.approx(0.4)
    # compared only on the --metric ones: DAPO's kept-groups reward never, its all-answer reward is unknown here
    assert "ebpo-dapo" not in doc["comparisons_equal_budget"] and "ebpo-grpo" in doc["comparisons_equal_budget"]


def test_a_resumed_run_merges_by_step_and_the_later_attempt_wins(tmp_path):
    first = {s: {"critic/score/mean": 0.1 * s} for s in range(1, 7)}
    second = {s: {"critic/score/mean": 1.0} for s in range(5, 9)}
    # names sort against the attempts' order: the first step decides, not the name
    _write(tmp_path / "run" / "z_attempt1.jsonl", first)
    _write(tmp_path / "run" / "a_attempt2.jsonl", second)
    warnings = []
    merged, files = runs_mod.read_run([str(tmp_path / "run")], warnings.append)
    assert sorted(merged) == list(range(1, 9)) and not warnings
    assert [merged[s]["critic/score/mean"] for s in range(1, 9)] == pytest.approx([0.1, 0.2, 0.3, 0.4, 1, 1, 1, 1])
    out = tmp_path / "out"
    rc = main(["compare", "--run", f"ebpo@1={tmp_path / 'run' / 'a_attempt2.jsonl'}",
               "--run", f"ebpo@1={tmp_path / 'run' / 'z_attempt1.jsonl'}", "--last", "5", "--out", str(out), "--quiet"])
    assert rc == 0
    m = json.loads((out / "comparison.json").read_text())["algos"]["ebpo"]["metrics"]["critic/score/mean"]
    assert m["final_mean"] == pytest.approx((0.4 + 4 * 1.0) / 5) and m["ci95"] == [None, None]


def test_tensorboard_event_files_are_read(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "tb"))
    for step in range(1, 4):
        writer.add_scalar("critic/score/mean", 0.25 * step, step)
    writer.close()
    merged, files = runs_mod.read_run([str(tmp_path / "tb")], print)
    assert len(files) == 1 and {s: m["critic/score/mean"] for s, m in merged.items()} == pytest.approx(
        {1: 0.25, 2: 0.5, 3: 0.75})


def test_bad_lines_one_seed_unpaired_seeds_missing_metrics_and_lengths(tmp_path, capsys):
    a1 = _write(tmp_path / "a1.jsonl", _steps([0.5] * 4), extra_lines=["{not json"])
    lines = a1.read_text().splitlines()
    a1.write_text("\n".join([lines[0], lines[1], "{oops", *lines[2:]]) + "\n")
    a2 = _write(tmp_path / "a2.jsonl", _steps([0.6] * 6))
    b1 = _write(tmp_path / "b1.jsonl", _steps([0.2] * 4, extra={s: {"ebpo/x": 1.0} for s in range(1, 5)}))
    out = tmp_path / "out"
    rc = main(["compare", "--run", f"a@1={a1}", "--run", f"a@2={a2}", "--run", f"b@1={b1}", "--run",
               f"b@3={_write(tmp_path / 'b3.jsonl', _steps([0.1] * 4))}", "--metric", "critic/score/mean,reward_all_answers,val-core/*", "--out", str(out), "--quiet"])
    assert rc == 0
    err = capsys.readouterr().err
    assert f"{a1}:3: not a verl file-logger line" in err and f"{a1}:7: not a verl file-logger line" in err
    doc = json.loads((out / "comparison.json").read_text())
    assert doc["algos"]["a"]["metrics"]["critic/score/mean"]["per_seed"] == {"1": 0.5, "2": 0.6}  # other lines read
    c = doc["comparisons"]["b-a"]["critic/score/mean"]
    assert c["n"] == 1 and c["seeds"] == ["1"] and c["ci95"] == [None, None] and "one seed" in c["verdict"]
    notes = " ".join(doc["notes"])
    assert "seeds 2, 3 have no partner; paired over 1" in notes
    assert "`ebpo/x` is missing from a@1, a@2, b@3" in notes
    assert doc["algos"]["a"]["steps"] == {"1": 4, "2": 6}
    assert doc["algos"]["b"]["metrics"]["ebpo/x"]["n"] == 1
    assert "--batch-size and --group-size" in notes


def test_one_seed_only_gives_means_without_intervals(tmp_path):
    out = tmp_path / "out"
    assert main(["compare", "--run", f"a@1={_write(tmp_path / 'a.jsonl', _steps([0.5] * 3))}", "--out", str(out)]) == 0
    doc = json.loads((out / "comparison.json").read_text())
    assert doc["algos"]["a"]["metrics"]["critic/score/mean"] == {"final_mean": 0.5, "ci95": [None, None], "n": 1,
                                                                 "per_seed": {"1": 0.5}}
    assert "a: one seed (1), means without intervals" in doc["notes"]


@pytest.mark.parametrize("argv, words", [
    (["--run", "grpo1=x.jsonl"], "--run takes ALGO@SEED=PATH"),
    (["--run", "grpo@=x.jsonl"], "--run takes ALGO@SEED=PATH"),
    (["--run", "grpo@1=/no/such/file.jsonl"], "/no/such/file.jsonl: it does not exist"),
    (["--run", "EMPTY"], "no metric lines"),
    (["--run", "VALONLY"], "no training-step metric lines"),
    (["--run", "GOOD", "--last", "0"], "--last must be an integer in [1, 100000]"),
    (["--run", "GOOD", "--negligible", "-1"], "--negligible must be a finite number >= 0"),
    (["--run", "GOOD", "--baseline", "dapo"], "--baseline 'dapo' is not among"),
    ([], "nothing to compare"),
    (["--run", "GOOD", "--eval", "grpo@1=/no/such.jsonl"], "/no/such.jsonl"),
])
def test_bad_input_is_one_line_and_exit_code_2(tmp_path, capsys, argv, words):
    files = {"EMPTY": _write(tmp_path / "e.jsonl", {}), "GOOD": _write(tmp_path / "g.jsonl", _steps([0.5])),
             "VALONLY": _write(tmp_path / "v.jsonl", {0: {"val-core/x/acc/mean@1": 0.1}})}
    argv = [f"grpo@1={files[a]}" if a in files else a for a in argv]
    capsys.readouterr()
    assert main(["compare", *argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("verl-ebpo compare: error: ") and words in err[-1], err


def test_only_compares_files_are_written_and_never_over_an_input(tmp_path):
    run = _write(tmp_path / "out" / "comparison.json", _steps([0.5] * 3))  # an input where an output would go
    (tmp_path / "out" / "mine.txt").write_text("keep")
    assert main(["compare", "--run", f"a@1={run}", "--out", str(tmp_path / "out")]) == 2
    assert json.loads(run.read_text().splitlines()[0])["step"] == 0
    run2 = _write(tmp_path / "r.jsonl", _steps([0.5] * 3))
    assert main(["compare", "--run", f"a@1={run2}", "--out", str(tmp_path / "out2")]) == 0
    (tmp_path / "out2" / "mine.txt").write_text("keep")
    assert main(["compare", "--run", f"a@1={run2}", "--out", str(tmp_path / "out2")]) == 0
    assert sorted(p.name for p in (tmp_path / "out2").iterdir()) == sorted(
        ["comparison.json", "report.md", "training_reward.png", "validation_accuracy.png", "mine.txt"])
    assert (tmp_path / "out" / "mine.txt").read_text() == "keep"


# -- evaluations ----------------------------------------------------------------------------------------------


def _gens(path: Path, correct: dict, k: int = 4, drop=None) -> Path:
    """correct: benchmark -> correct samples per problem (of k); the test scorer marks 'right' correct."""
    rows = []
    for bench, counts in correct.items():
        for p, c in enumerate(counts):
            for j in range(k):
                if drop == (bench, p, j):
                    continue
                rows.append({"benchmark": bench, "problem_index": p, "sample_index": j, "ground_truth": "x",
                             "response": "right" if j < c else "wrong"})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def scorer(tmp_path, monkeypatch):
    (tmp_path / "known_scorer.py").write_text(
        "def score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return {'score': float(solution_str == 'right'), 'acc': solution_str == 'right'}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("known_scorer", None)
    return "known_scorer:score"


def test_eval_pass_at_1_over_seeds_and_problems_by_hand(tmp_path, scorer):
    # aime24, 2 problems x 4 samples: grpo seeds 1, 2 get Pass@1 50 and 75; ebpo 75 and 100
    table = {("grpo", "1"): [2, 2], ("grpo", "2"): [3, 3], ("ebpo", "1"): [3, 3], ("ebpo", "2"): [4, 4]}
    args = []
    for (algo, seed), counts in table.items():
        args += ["--eval", f"{algo}@{seed}={_gens(tmp_path / f'{algo}{seed}.jsonl', {'aime24': counts})}"]
    out = tmp_path / "out"
    assert main(["compare", *args, "--scorer", scorer, "--out", str(out), "--quiet"]) == 0
    doc = json.loads((out / "comparison.json").read_text())
    e = doc["eval"]["grpo"]["aime24"]
    assert e["mean"] == pytest.approx(62.5) and e["per_seed"] == {"1": 50.0, "2": 75.0}
    # rows [50, 50], [75, 75]: MS_seed = 2 x var([50, 75]) = 625, MS_problem = 0, MS_error = 0 -> Var = 625 / 4,
    # Satterthwaite df = 1
    half = student_t.ppf(0.975, 1) * math.sqrt(625 / 4)
    assert e["ci95"] == pytest.approx([62.5 - half, 62.5 + half])
    c = doc["eval_comparisons"]["ebpo-grpo"]["aime24"]
    assert c["diff"] == pytest.approx(25.0) and c["ci95"] == pytest.approx([25.0, 25.0])


def test_eval_missing_samples_refused_unless_allow_partial(tmp_path, scorer, capsys):
    full = _gens(tmp_path / "a.jsonl", {"aime24": [2, 2]})
    part = _gens(tmp_path / "b.jsonl", {"aime24": [2, 2]}, drop=("aime24", 1, 3))
    argv = ["compare", "--eval", f"a@1={full}", "--eval", f"a@2={part}", "--scorer", scorer, "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    assert "samples per problem [3, 4], expected 4" in capsys.readouterr().err
    assert main([*argv, "--allow-partial"]) == 0


def test_compare_and_score_py_share_one_scoring(tmp_path):
    """score.py's Pass@1 and compare's per-seed Pass@1 for one file, with the package's reward (the default)."""
    import subprocess

    rows = [{"benchmark": "aime24", "problem_index": p, "sample_index": j, "ground_truth": str(p + 1),
             "response": f"Answer: {p + 1}" if j <= p else "Answer: 0"} for p in range(3) for j in range(16)]
    gens = tmp_path / "g.jsonl"
    gens.write_text("".join(json.dumps(r) + "\n" for r in rows))
    repo = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, str(repo / "recipes" / "eval" / "score.py"), "--model", "qwen3_8b",
                           "--run", f"grpo={gens}", "--out-json", str(tmp_path / "s.json"), "--workers", "1"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    ours = json.loads((tmp_path / "s.json").read_text())["runs"]["grpo"]["benchmarks"]["aime24"]["pass@1"]
    assert ours == pytest.approx(100 * (1 + 2 + 3) / 48)
    assert main(["compare", "--eval", f"grpo@1={gens}", "--workers", "1", "--out", str(tmp_path / "o"), "--quiet"]) == 0
    doc = json.loads((tmp_path / "o" / "comparison.json").read_text())
    assert doc["eval"]["grpo"]["aime24"]["per_seed"]["1"] == pytest.approx(ours)


# -- the interval over seeds and problems -----------------------------------------------------------------------


def test_crossed_interval_by_hand():
    # [[1, 2], [3, 6]]: MS_seed 9, MS_problem 4, MS_error 1 -> Var(mean) = (9 + 4 - 1) / 4 = 3,
    # Satterthwaite df = 12^2 / (81 + 16 + 1)
    ci = crossed_mean_ci([[1.0, 2.0], [3.0, 6.0]])
    half = student_t.ppf(0.975, 144 / 98) * math.sqrt(3.0)
    assert ci.mean == 3.0 and ci.n == 2 and [ci.lo, ci.hi] == pytest.approx([3 - half, 3 + half])
    assert math.isnan(crossed_mean_ci([[1.0, 2.0]]).lo)  # one seed: no interval
    assert crossed_mean_ci([[1.0], [3.0]]) == mean_ci([1.0, 3.0])  # one problem: the t interval over seeds


def test_crossed_interval_covers_a_known_rate_in_simulation():
    """3 seeds x 30 problems x 16 samples, problem rates U(0.1, 0.9), seed shifts U(-0.04, 0.04): the true mean
    rate is 0.5. The crossed interval covers it ~95% of the time; the t interval over seeds alone (which treats the
    30 problems as fixed) does not."""
    rng = np.random.default_rng(0)
    hits = seed_only = 0
    n = 400
    for _ in range(n):
        rate = rng.uniform(0.1, 0.9, 30)[None, :] + rng.uniform(-0.04, 0.04, 3)[:, None]
        x = rng.binomial(16, rate) / 16
        ci = crossed_mean_ci(x)
        hits += ci.lo <= 0.5 <= ci.hi
        naive = mean_ci(x.mean(axis=1))
        seed_only += naive.lo <= 0.5 <= naive.hi
    assert 0.92 <= hits / n <= 0.98
    assert seed_only / n < 0.85  # measured: 0.945 and 0.81
