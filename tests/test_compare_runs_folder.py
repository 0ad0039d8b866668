"""`verl-ebpo compare --runs DIR`: a folder of runs in the demo's layout (ALGO/seedK/, rollout dumps
beside the metrics) reads as the same --run flags would; DAPO by --dapo, not by name; verdicts only for --metric;
the power explanation once; one note for the metrics GRPO lacks; the figures' bands inside the metric's range.
And an --eval file without rows for a benchmark is refused unless --allow-partial."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from verl_ebpo.tools.cli import main
from verl_ebpo.tools.compare import plots
from verl_ebpo.tools.compare.markdown import verdict_lines

B, G = 2, 4
SEEDS = (0, 1, 2)
OFFSET = {"grpo": (0.0, 0.05, 0.1), "ebpo": (0.02, 0.09, 0.1), "dapo": (0.25, 0.2, 0.35)}  # per seed


def _metrics(algo: str, seed: int, steps: int = 12) -> list[dict]:
    """verl's metrics of one run: reward rising with the step, shifted by seed; EBPO logs its ebpo/* family,
    DAPO (here without verl's group filter metrics) its replay buffer's discarded answers."""
    out = []
    for s in range(1, steps + 1):
        score = 0.1 + 0.02 * s + OFFSET[algo][seed]
        m = {"critic/score/mean": score, "timing_s/step": 1.0, "response_length/mean": 3.0}
        if algo == "ebpo":
            m |= {"ebpo/zero_adv_frac": 0.1, "ebpo/shrinkage_mean": 0.3, "ebpo/mu_glob": 0.2}
        if algo == "dapo":
            m |= {"replay/discarded_answers": 0, "replay/discarded_reward_sum": 0.0}
        out.append({"step": s, "data": m})
    out.append({"step": steps, "data": {"val-core/x/acc/mean@1": 0.2 + OFFSET[algo][seed]}})
    out.insert(0, {"step": 0, "data": {"val-core/x/acc/mean@1": 0.0}})
    return out


def _demo_layout(root: Path) -> Path:
    """root/runs/ALGO/seedK/{metrics.jsonl, rollouts/N.jsonl, trainer.log} as `verl-ebpo demo` writes them."""
    runs = root / "runs"
    for algo in ("grpo", "dapo", "ebpo"):
        for seed in SEEDS:
            d = runs / algo / f"seed{seed}"
            (d / "rollouts").mkdir(parents=True)
            (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _metrics(algo, seed)))
            for step in (1, 2):  # verl's rollout dumps: JSON lines of another shape
                (d / "rollouts" / f"{step}.jsonl").write_text(
                    json.dumps({"input": "3+1=", "output": "4", "score": 1.0, "step": step}) + "\n")
            (d / "trainer.log").write_text("log\n")
    # a rollout dump outside rollouts/ is recognised by its content
    (runs / "grpo" / "seed0" / "dump.jsonl").write_text(json.dumps({"input": "a", "output": "b", "step": 1}) + "\n")
    return runs


def _doc(out: Path) -> dict:
    return json.loads((out / "comparison.json").read_text())


def test_runs_folder_pairs_algorithms_as_run_flags_would(tmp_path, capsys):
    runs = _demo_layout(tmp_path)
    size = ["--batch-size", str(B), "--group-size", str(G), "--dapo", "dapo"]
    assert main(["compare", "--runs", str(runs), *size, "--out", str(tmp_path / "R")]) == 0
    stdout = capsys.readouterr().out
    flags = [f"--run={a}@{s}={runs / a / f'seed{s}' / 'metrics.jsonl'}" for s in SEEDS for a in ("grpo", "dapo", "ebpo")]
    assert main(["compare", *flags, *size, "--out", str(tmp_path / "F"), "--quiet"]) == 0
    folder, by_flag = _doc(tmp_path / "R"), _doc(tmp_path / "F")
    assert set(folder["algos"]) == {"grpo", "dapo", "ebpo"}
    assert all(folder["algos"][a]["seeds"] == ["0", "1", "2"] for a in folder["algos"])
    for key in ("algos", "comparisons", "comparisons_equal_budget", "number_of_comparisons"):
        assert folder[key] == by_flag[key], key
    # verdicts only for the default --metric: the reward of all answers and validation accuracy, every pair
    assert {k for c in folder["comparisons"].values() for k in c} == {"reward_all_answers", "val-core/x/acc/mean@1"}
    assert set(folder["comparisons"]) == {"dapo-grpo", "ebpo-grpo", "ebpo-dapo"}
    assert "timing_s/step" in folder["algos"]["grpo"]["metrics"]  # summarised, not compared
    # the table on stdout: mean and interval per algorithm and metric
    grpo = folder["algos"]["grpo"]["metrics"]["reward_all_answers"]
    row = next(line for line in stdout.splitlines() if line.split()[:2] == ["reward_all_answers", "GRPO"])
    assert f"{grpo['final_mean']:.4g}" in row and f"[{grpo['ci95'][0]:.4g}, {grpo['ci95'][1]:.4g}]" in row
    # one note for the ebpo/* family GRPO and DAPO lack, not one per metric
    missing = [n for n in folder["notes"] if "missing from" in n]
    assert missing == ["`no_signal_share`, `ebpo/*` (3 metrics) are missing from grpo@0, grpo@1, grpo@2, dapo@0, "
                       "dapo@1, dapo@2: compared where present"]


def test_the_power_explanation_is_said_once_per_report(tmp_path, capsys):
    runs = _demo_layout(tmp_path)
    out = tmp_path / "R"
    assert main(["compare", "--runs", str(runs), "--batch-size", "2", "--group-size", "4", "--dapo", "dapo",
                 "--metric", "reward_all_answers,val-core/*,timing_s/step,response_length/mean", "--out", str(out)]) == 0
    stdout = capsys.readouterr().out
    report = (out / "report.md").read_text()
    doc = _doc(out)
    verdicts = [c["verdict"] for k in ("comparisons", "comparisons_equal_budget") for c in doc[k].values()
                for c in c.values()]
    unresolved = [v for v in verdicts if "not resolved" in v]
    assert len(unresolved) >= 2  # the power sentence would have been repeated
    for text in (stdout, report):
        assert text.count("with 80% power") == 0 and text.count("in 80% of repetitions") == 1
        assert text.count("resolvable at 80% power: ±") == len(unresolved)


def test_short_verdict_keeps_the_number_and_leaves_other_sentences_alone():
    v = ("EBPO vs GRPO on x: not resolved (-0.007, 95% CI [-0.125, +0.110], 3 seeds); these seeds would resolve a "
         "true difference of ±0.146 with 80% power, so a smaller effect is not excluded.")
    other = "EBPO is higher than GRPO on x (+0.2, 95% CI [+0.1, +0.3], 3 seeds)."
    short, kept, note = verdict_lines([v, other])
    assert short == ("EBPO vs GRPO on x: not resolved (-0.007, 95% CI [-0.125, +0.110], 3 seeds; resolvable at 80% "
                     "power: ±0.146).")
    assert kept == other and verdict_lines([other]) == [other] and "in 80% of repetitions" in note


def test_dapo_is_known_by_the_flag_not_the_name(tmp_path):
    runs = _demo_layout(tmp_path)  # DAPO's runs here log no group filter metric and drop nothing
    common = ["--runs", str(runs), "--batch-size", "2", "--group-size", "4", "--metric", "critic/score/mean", "--quiet"]
    assert main(["compare", *common, "--out", str(tmp_path / "a")]) == 0
    assert "critic/score/mean" in _doc(tmp_path / "a")["comparisons"]["dapo-grpo"]  # not DAPO by its name alone
    assert main(["compare", *common, "--dapo", "dapo", "--out", str(tmp_path / "b")]) == 0
    doc = _doc(tmp_path / "b")
    assert "dapo-grpo" not in doc["comparisons"] and doc["settings"]["dapo"] == ["dapo"]
    assert main(["compare", *common, "--dapo", "dapoo", "--out", str(tmp_path / "c")]) == 2


def test_runs_layouts_one_algorithm_the_recipes_and_globs(tmp_path, capsys):
    from verl_ebpo.tools.compare.runs import CompareError, discover_runs

    runs = _demo_layout(tmp_path)
    assert discover_runs(runs / "ebpo") == ({("ebpo", str(s)): [str(runs / "ebpo" / f"seed{s}")] for s in SEEDS}, [])
    root = tmp_path / "ckpts" / "verl_ebpo"  # the recipes' $CKPTS_ROOT/$PROJECT_NAME
    for algo, seed, rest in (("ebpo", 42, ""), ("grpo", 42, ""), ("ebpo", 43, "-authors")):
        d = root / f"qwen3_8b-{algo}-g4-s{seed}{rest}" / "metrics"
        d.mkdir(parents=True)
        (d / "attempt-1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _metrics(algo, 0)))
    found, skipped = discover_runs(root)
    assert not skipped and set(found) == {("ebpo", "42"), ("grpo", "42"), ("ebpo-authors", "43")}
    (root / "llama3_8b-ebpo-g4-s42").mkdir()
    (root / "llama3_8b-ebpo-g4-s42" / "m.jsonl").write_text(json.dumps(_metrics("ebpo", 0)[1]) + "\n")
    with pytest.raises(CompareError, match="several models"):
        discover_runs(root)
    with pytest.raises(CompareError, match="no runs found"):
        discover_runs(tmp_path / "ckpts")
    # a glob: both algorithms' folders, the same runs as the parent folder
    assert main(["compare", "--runs", str(runs / "[ge]*"), "--out", str(tmp_path / "g"), "--quiet"]) == 0
    assert set(_doc(tmp_path / "g")["algos"]) == {"grpo", "ebpo"}
    assert main(["compare", "--runs", str(tmp_path / "nothing*"), "--out", str(tmp_path / "n")]) == 2
    assert "matches no folder" in capsys.readouterr().err


def test_folder_mode_of_run_skips_rollout_dumps(tmp_path):
    runs = _demo_layout(tmp_path)
    assert main(["compare", "--run", f"grpo@0={runs / 'grpo' / 'seed0'}", "--out", str(tmp_path / "o"), "--quiet"]) == 0
    assert _doc(tmp_path / "o")["algos"]["grpo"]["steps"] == {"0": 12}


# -- figures ----------------------------------------------------------------------------------------------------


def test_a_band_that_would_cross_the_range_is_clipped_and_the_axes_stay_in_it():
    """Validation accuracy of three seeds at 0.0 / 0.0 / 0.9 and 1.0 / 1.0 / 0.1: the raw 95% bands reach below 0
    and above 1; drawn, every band vertex is inside [0, 1], the axes' limits are [0, 1] with 2% room, the caption
    says so, and the sparse curves have markers."""
    steps = np.array([0, 10])
    curves = {"ebpo": [(steps, None, np.array([0.0, 1.0])), (steps, None, np.array([0.0, 1.0])),
                       (steps, None, np.array([0.9, 0.1]))]}
    raw = plots.band(np.array([c[2] for c in curves["ebpo"]]))
    assert raw[1].min() < 0 and raw[2].max() > 1  # the band would cross the range
    plt, fig, note = plots.metric_figure(curves, "validation accuracy", "t", window=1, kind="share", every="validation")
    try:
        (ax,) = fig.axes  # no empty answers panel: no answers known
        assert ax.get_ylim() == pytest.approx((-0.02, 1.02))
        bands = [p for p in ax.collections]
        assert bands and all(0.0 <= y <= 1.0 for p in bands for path in p.get_paths() for y in path.vertices[:, 1])
        assert all(line.get_marker() == "o" for line in ax.lines)
        assert "clipped to [0, 1]" in note and "3 seeds" in note and "unsmoothed" in note
    finally:
        plt.close(fig)
    # one seed: no band, and the caption says so instead of a "95% band"
    plt, fig, note = plots.metric_figure({"ebpo": curves["ebpo"][:1]}, "acc", "t", window=5, kind="share")
    assert not fig.axes[0].collections and "no band" in note and "95%" not in note and "5 logged steps" in note
    plt.close(fig)


def test_reward_range_follows_the_values_and_unknown_algorithms_get_a_colour_of_their_own():
    assert plots.value_range("reward", [np.array([0.0, 0.5, 1.0])]) == (0.0, 1.0)
    assert plots.value_range("reward", [np.array([-1.0, 0.5])]) is None
    colors = plots.colors_for(["grpo", "mine", "yours"])
    assert colors["grpo"] == "tab:blue" and len(set(colors.values())) == 3


def test_answers_panel_runs_each_seed_to_its_own_end():
    xs = [np.array([8.0, 16.0, 24.0]), np.array([8.0, 16.0, 24.0, 32.0, 40.0])]
    ys = [np.array([0.1, 0.2, 0.3]), np.array([0.1, 0.2, 0.3, 0.4, 0.5])]
    grid, c = plots.seed_curves(xs, ys, "answers")
    assert grid[-1] == 40.0 and np.isnan(c[0, -1]) and c[1, -1] == pytest.approx(0.5)
    mean, _, _ = plots.band(c)
    assert np.isnan(mean[-1]) and np.isfinite(mean[0])  # the mean only where both seeds reached


@pytest.mark.parametrize("fmt, magic", [("png", b"\x89PNG"), ("pdf", b"%PDF"), ("svg", b"<?xml")])
def test_figures_in_each_format(tmp_path, fmt, magic):
    runs = _demo_layout(tmp_path)
    out = tmp_path / "R"
    assert main(["compare", "--runs", str(runs), "--format", fmt, "--out", str(out), "--quiet"]) == 0
    for view in plots.VIEWS:
        assert (out / f"{view}.{fmt}").read_bytes()[:len(magic)] == magic
    if fmt == "png":
        from PIL import Image

        dpi = Image.open(out / "training_reward.png").info["dpi"]
        assert dpi[0] == pytest.approx(150, abs=1)


# -- an --eval file without a benchmark ----------------------------------------------------------------------------


@pytest.fixture
def scorer(tmp_path, monkeypatch):
    (tmp_path / "known_scorer.py").write_text(
        "def score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return {'score': float(solution_str == 'right'), 'acc': solution_str == 'right'}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("known_scorer", None)
    return "known_scorer:score"


def _gens(path: Path, correct: dict, k: int = 4) -> Path:
    rows = [{"benchmark": bench, "problem_index": p, "sample_index": j, "ground_truth": "x",
             "response": "right" if j < c else "wrong"}
            for bench, counts in correct.items() for p, c in enumerate(counts) for j in range(k)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_an_eval_file_without_a_benchmark_is_refused_unless_allow_partial(tmp_path, scorer, capsys):
    both = _gens(tmp_path / "a1.jsonl", {"aime24": [2, 2], "math500": [4, 0]})
    other = _gens(tmp_path / "a2.jsonl", {"aime24": [3, 3], "math500": [4, 4]})
    lacking = _gens(tmp_path / "a3.jsonl", {"aime24": [1, 1]})  # no math500 rows at all
    argv = ["compare", "--eval", f"a@1={both}", "--eval", f"a@2={other}", "--eval", f"a@3={lacking}",
            "--scorer", scorer, "--workers", "1", "--out", str(tmp_path / "o"), "--quiet"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "a3.jsonl: math500: no rows for this benchmark, which has 2 problems (--allow-partial to accept)" in err
    assert len(err.strip().splitlines()) == 1
    assert main([*argv, "--allow-partial"]) == 0
    doc = _doc(tmp_path / "o")
    assert doc["eval"]["a"]["math500"]["per_seed"] == {"1": 50.0, "2": 100.0} and doc["eval"]["a"]["math500"]["n"] == 2
    assert any("eval a math500: seeds 3 have no rows" in n for n in doc["notes"])
    # the other per-benchmark count named by the user: --samples for a benchmark no file has
    assert main([*argv[:-3], "--samples", "aime25=4", "--out", str(tmp_path / "p")]) == 2
    assert "--samples names aime25, which no --eval file has" in capsys.readouterr().err
