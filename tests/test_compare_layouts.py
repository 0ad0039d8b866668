"""`verl-ebpo compare --runs DIR` (issue 48): every folder under DIR that holds a metrics file is compared or named in
one line saying why not; an existing path is taken literally; a summary.json out of range is one line. Figures
(issue 50): any `val-core/*/acc/mean@N`, seeds validated at different steps, a y axis that fits the data, the
answers panel only where it differs from the step panel, readable answer ticks, a constant printed as one number."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from verl_ebpo.tools.cli import main
from verl_ebpo.tools.compare import plots


def _run(d: Path, level: float = 0.4, steps: int = 20, val_every: int = 5, val_key: str = "val-core/math/acc/mean@16",
         extra: dict | None = None) -> Path:
    """verl's file-logger metrics of one run in folder `d`: reward `level` + 0.005 x step, validation every
    `val_every` steps."""
    d.mkdir(parents=True)
    lines = []
    for s in range(1, steps + 1):
        data = {"critic/score/mean": level + 0.005 * s + 0.01 * (s % 3), **(extra or {})}
        if s % val_every == 0:
            data[val_key] = level + 0.008 * s
        lines.append({"step": s, "data": data})
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return d


def _compare(argv, out: Path, capsys):
    rc = main(["compare", *argv, "--out", str(out)])
    captured = capsys.readouterr()
    doc = json.loads((out / "comparison.json").read_text()) if rc == 0 else None
    return rc, captured, doc


def _runs(doc) -> set:
    return {f"{a}@{s}" for a, e in doc["algos"].items() for s in e["seeds"]}


def test_a_stray_seed_folder_beside_algorithm_folders_is_named_and_the_others_compared(tmp_path, capsys):
    root = tmp_path / "runs"
    for algo in ("grpo", "ebpo"):
        for seed in (1, 2):
            _run(root / algo / f"seed{seed}")
    _run(root / "seed3")
    rc, io, doc = _compare(["--runs", str(root)], tmp_path / "o", capsys)
    assert rc == 0 and _runs(doc) == {"grpo@1", "grpo@2", "ebpo@1", "ebpo@2"}
    line = f"--runs: {root / 'seed3'} not compared: a seed folder beside ALGO/seedK/ folders has no algorithm"
    assert sum(line in x for x in io.err.splitlines()) == 1 and any(line in n for n in doc["notes"])


def test_recipe_folders_and_an_algo_seed_folder_are_all_compared(tmp_path, capsys):
    root = tmp_path / "proj"
    for algo in ("grpo", "ebpo"):
        _run(root / f"qwen3_8b-{algo}-g4-s42" / "metrics")
    _run(root / "dapo" / "seed1")
    rc, io, doc = _compare(["--runs", str(root)], tmp_path / "o", capsys)
    assert rc == 0 and _runs(doc) == {"grpo@42", "ebpo@42", "dapo@1"} and "not compared" not in io.err


def test_two_folders_of_one_run_are_refused_naming_both(tmp_path, capsys):
    root = tmp_path / "runs"
    _run(root / "ebpo" / "seed1")
    _run(root / "ebpo" / "seed_1", level=0.5)
    rc, io, _ = _compare(["--runs", str(root)], tmp_path / "o", capsys)
    assert rc == 2 and len(io.err.strip().splitlines()) == 1 and "Traceback" not in io.err
    assert f"{root / 'ebpo' / 'seed1'} and {root / 'ebpo' / 'seed_1'} are both ebpo@1" in io.err


def test_names_outside_the_layout_are_named_and_a_capitalised_seed_is_read(tmp_path, capsys):
    root = tmp_path / "runs"
    for d in ("ebpo/seed1", "ebpo/Seed3", "ebpo v2/seed1", "ébpo/seed1", "grpo/seed1", "grpo/seed 3", "loose"):
        _run(root / d)
    rc, io, doc = _compare(["--runs", str(root)], tmp_path / "o", capsys)
    assert rc == 0 and _runs(doc) == {"ebpo@1", "ebpo@3", "grpo@1"}
    named = [n for n in doc["notes"] if n.startswith("--runs: ")]
    assert sorted(named) == sorted([
        f"--runs: {root / 'ebpo v2' / 'seed1'} not compared: algorithm 'ebpo v2': a name of ASCII letters, digits "
        "and _.+- is needed (rename it)",
        f"--runs: {root / 'ébpo' / 'seed1'} not compared: algorithm 'ébpo': a name of ASCII letters, digits "
        "and _.+- is needed (rename it)",
        f"--runs: {root / 'grpo' / 'seed 3'} not compared: not a run folder of the layouts read ({_layouts()})",
        f"--runs: {root / 'loose'} not compared: not a run folder of the layouts read ({_layouts()})"])
    assert all(sum(n in line for line in io.err.splitlines()) == 1 for n in named)


def _layouts() -> str:
    from verl_ebpo.tools.compare.runs import LAYOUTS

    return LAYOUTS


def test_an_existing_path_is_taken_literally_not_as_a_glob(tmp_path, capsys):
    _run(tmp_path / "runs[v2]" / "ebpo" / "seed1")
    _run(tmp_path / "runsv" / "grpo" / "seed1")  # what the glob `runs[v2]` would match
    rc, _, doc = _compare(["--runs", str(tmp_path / "runs[v2]")], tmp_path / "o", capsys)
    assert rc == 0 and _runs(doc) == {"ebpo@1"}
    rc, _, doc = _compare(["--runs", str(tmp_path / "runs[v]")], tmp_path / "g", capsys)  # no such path: a glob
    assert rc == 0 and _runs(doc) == {"grpo@1"}


# -- figures ---------------------------------------------------------------------------------------------------------


def test_mean_at_16_seeds_validated_at_different_steps_draw_each_seeds_points(tmp_path, capsys):
    root = tmp_path / "runs"
    _run(root / "ebpo" / "seed1", val_every=5)  # validations at 5, 10, 15, 20
    _run(root / "ebpo" / "seed2", val_every=4)  # at 4, 8, 12, 16, 20: only step 20 in common
    _run(root / "grpo" / "seed1", val_every=5, level=0.35)
    _run(root / "grpo" / "seed2", val_every=4, steps=18, level=0.35)  # no step in common with seed1
    rc, _, doc = _compare(["--runs", str(root)], tmp_path / "o", capsys)
    assert rc == 0 and (tmp_path / "o" / "validation_accuracy.png").is_file()
    assert "validation_accuracy.png" in (tmp_path / "o" / "report.md").read_text()
    runs = _read_runs(root)
    curves = {a: [(np.asarray(sorted(v)), None, np.asarray([v[k] for k in sorted(v)])) for v in rs]
              for a, rs in runs.items()}
    plt, fig, note = plots.metric_figure(curves, "acc", "t", window=1, kind="share", every="validation")
    try:
        (ax,) = fig.axes
        drawn = {(round(x, 6), round(y, 6)) for line in ax.lines for x, y in line.get_xydata()}
        for rs in runs.values():  # every seed's every validation is on the figure
            assert all((s, round(v, 6)) in drawn for val in rs for s, v in val.items())
        # EBPO's seeds share one validation of four (step 20), GRPO's none
        assert "EBPO, GRPO: the seeds logged different validations, so each seed's points are drawn, no mean" in note
        assert "bold: mean" not in note and not ax.collections
    finally:
        plt.close(fig)


def _read_runs(root: Path) -> dict:
    out = {}
    for algo in ("ebpo", "grpo"):
        for d in sorted((root / algo).iterdir()):
            lines = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
            out.setdefault(algo, []).append({r["step"]: r["data"]["val-core/math/acc/mean@16"] for r in lines
                                             if "val-core/math/acc/mean@16" in r["data"]})
    return out


def test_the_y_axis_fits_a_curve_far_from_0_and_1():
    steps = np.arange(1, 21)
    curves = {"ebpo": [(steps, None, 0.33 + 0.012 * steps), (steps, None, 0.34 + 0.011 * steps)]}
    plt, fig, _ = plots.metric_figure(curves, "reward", "t", window=1, kind="share")
    try:
        lo, hi = fig.axes[0].get_ylim()
        assert 0.25 < lo < 0.345 and 0.56 < hi < 0.65
    finally:
        plt.close(fig)


def test_the_answers_panel_is_drawn_only_where_it_differs_and_its_ticks_read(tmp_path):
    steps = np.arange(1, 21)
    same = {a: [(steps, 409_600.0 * steps, 0.4 + 0.01 * steps)] for a in ("grpo", "ebpo")}
    plt, fig, note = plots.metric_figure(same, "reward", "t")
    assert len(fig.axes) == 1 and "409,600 answers generated a step in every run" in note
    plt.close(fig)
    dapo = {**same, "dapo": [(steps, 409_600.0 * steps + 40_000.0 * steps ** 1.2, 0.4 + 0.01 * steps)]}
    plt, fig, note = plots.metric_figure(dapo, "reward", "t")
    try:
        assert len(fig.axes) == 2 and "each seed to its own end" in note
        fig.canvas.draw()
        labels = [t.get_text() for t in fig.axes[1].get_xticklabels() if t.get_text()]
        assert labels and all(len(t) <= 5 and t[-1] in "kM0" for t in labels), labels  # "2M", "500k", "0"
    finally:
        plt.close(fig)


def test_a_constant_is_printed_as_one_number(tmp_path, capsys):
    root = tmp_path / "runs"
    for algo in ("grpo", "ebpo"):
        for seed in (1, 2):
            _run(root / algo / f"seed{seed}", level=0.3 + 0.01 * seed)
    rc, io, _ = _compare(["--runs", str(root), "--batch-size", "512", "--group-size", "8"], tmp_path / "o", capsys)
    rows = [line.split() for line in io.out.splitlines() if line.strip().startswith("answers_generated")]
    assert rc == 0 and rows and all(r[-1] == "81,920" for r in rows), rows  # 20 steps x 512 x 8, no "[x, x]"
