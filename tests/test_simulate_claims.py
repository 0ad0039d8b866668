"""What `verl-ebpo simulate` claims: the verdict counts in its reports,
what `--no-figure` says it wrote, the lr grid warnings, weight decay toward the initial policy."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
import torch

from verl_ebpo.tools import cli
from verl_ebpo.tools.simulate import report, task as simtask
from verl_ebpo.tools.simulate.options import SimOptions

ROOT = os.path.join(os.path.dirname(__file__), "..")
SMALL = ["--G", "2", "4", "--seeds", "2", "--steps", "3", "--prompts", "16", "--answers-per-step", "8",
         "--estimators", "grpo", "ebpo", "--regime", "custom", "--grad-draws", "2", "--grad-warmup", "1"]


def _summary(name: str) -> dict:
    with open(os.path.join(ROOT, "docs", "results", name, "summary.json"), encoding="utf-8") as f:
        return json.load(f)


def test_no_figure_run_does_not_claim_a_figure(tmp_path, capsys):
    """`--no-figure` names the files it wrote and claims no figure ("wrote ... and the figure")."""
    out = tmp_path / "sim"
    assert cli.main(["simulate", "--out", str(out), *SMALL, "--no-figure", "--quiet"]) == 0
    text = capsys.readouterr().out.replace(str(out), "OUT")  # the test's folder name holds the word
    assert not (out / "simulate.png").exists()
    assert "figure" not in text and "simulate.png" not in text
    assert "summary.json, results.md, curves.csv in" in text
    assert cli.main(["simulate", "--out", str(tmp_path / "with"), *SMALL, "--quiet"]) == 0
    assert "simulate.png" in capsys.readouterr().out and (tmp_path / "with" / "simulate.png").exists()


def test_the_report_prints_the_tables_and_the_verdict_counts_with_holm(tmp_path, capsys):
    """No verdict sentence per comparison: the tables with their intervals, and one sentence of counts per kind
    with how many stay resolved after Holm's correction, on stdout and in results.md."""
    assert cli.main(["simulate", "--out", str(tmp_path / "s"), *SMALL, "--quiet"]) == 0
    text = capsys.readouterr().out
    md = (tmp_path / "s" / "results.md").read_text()
    for out in (text, md):
        assert out.count("resolved after Holm (") == 3 and "| regime | estimator | G | lr |" in out
        assert "ebpo vs grpo" not in out and "ebpo is " not in out


def test_a_coarse_lr_grid_is_warned_about_before_the_run():
    """`--lr-grid 1 10` skips 3; the grid is only extended outward, so a best lr between the two is
    never tried. The 1-3 grid gives no warning."""
    from verl_ebpo.tools.simulate import grid_warnings

    warn = grid_warnings(SimOptions(lr_grid=(1.0, 10.0)))
    assert len(warn) == 1 and "1 -> 10" in warn[0] and "only extended outward" in warn[0]
    assert grid_warnings(SimOptions()) == [] and grid_warnings(SimOptions(lr_grid=(0.3,))) == []


def test_the_committed_small_run_names_its_cells_at_an_edge():
    """The `--lr-grid 1 10` case (the committed small configuration, DAPO at G=4): every lr lowers the tuning AUC,
    so the smallest wins, the grid walks down to 0.01 and stops there at an edge. The run says so."""
    s = _summary("simulate_small")
    assert s["regimes"]["hard"]["dapo"]["4"]["lr"] == 0.01
    auc = s["tune_auc"]["hard"]["dapo|4"]
    assert all(a >= b for a, b in zip(auc, auc[1:]))
    assert any("chosen lr at an edge" in line and "hard/dapo/4" in line for line in report.lr_warnings(s))


def test_cli_prints_the_lr_warnings_on_stderr(tmp_path, capsys):
    assert cli.main(["simulate", "--out", str(tmp_path / "s"), *SMALL, "--lr-grid", "1", "10", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "warning: --lr-grid 1 10 has neighbours more than x3.5 apart" in err


def test_weight_decay_pulls_the_parameters_toward_the_initial_policy():
    """Every active step multiplies theta by (1 - w) before the update; inactive rows do not move; the option's
    range is [0, 0.5]."""
    theta = torch.tensor([[1.0, -2.0], [3.0, 4.0]], dtype=torch.float64)
    opt = simtask.Optimizer(0.1, theta.shape, weight_decay=0.2)
    grad = torch.tensor([[1.0, 1.0], [1.0, 1.0]], dtype=torch.float64)
    new = opt.step(theta, grad, torch.tensor([True, False]))
    # Adam's first step moves each parameter by lr x g / (|g| + eps) = 0.1, after the decay
    assert torch.allclose(new[0], theta[0] * 0.8 + 0.1) and torch.equal(new[1], theta[1])
    with pytest.raises(ValueError, match="weight_decay"):
        simtask.Optimizer(0.1, theta.shape, weight_decay=1.0)
    with pytest.raises(ValueError, match="weight_decay"):
        SimOptions(weight_decay=0.6)
    assert SimOptions().weight_decay == 0.0


def test_weight_decay_changes_learning_not_the_initial_gradient():
    from verl_ebpo.tools.simulate import engine

    base = dict(G=(2,), seeds=2, prompts=16, heldout=4, steps=4, answers_per_step=8, features=4, regime="custom",
                estimators=("grpo",), erosion=0.0, lr_grid=(3.0,))
    off = engine.run_sweep(SimOptions(**base)).runs[("grpo", 2)]
    on = engine.run_sweep(SimOptions(**base, weight_decay=0.3)).runs[("grpo", 2)]
    assert np.array_equal(off.curve[:, :2], on.curve[:, :2])  # the first step starts from theta = 0 either way
    assert not np.allclose(off.curve[:, -1], on.curve[:, -1])


def test_comparison_intervals_recover_the_noise_ratio_on_the_log_scale():
    c = _summary("simulate_default")["regime_comparisons"]["hard"]["ebpo-drgrpo"]["2"]
    iv = report.comparison_intervals(c, 5)["gradient noise"]
    assert math.exp(iv.mean) == pytest.approx(c["noise_ratio"], rel=1e-12)
    assert math.exp(iv.lo) == pytest.approx(c["noise_ratio_ci95"][0], rel=1e-12)
    assert iv.p_value() < 1e-4
