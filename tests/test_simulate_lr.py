"""The learning-rate study (`verl-ebpo simulate`): best lr from the tuning seeds only, EBPO against each
baseline at each one's own best lr, the committed results and the docs blocks rendered from them."""

import json
import re
from pathlib import Path

import numpy as np
import pytest

from verl_ebpo.tools.simulate import lr
from verl_ebpo.tools.simulate.options import ESTIMATORS, GRID, SimOptions

ROOT = Path(__file__).resolve().parents[1]
SUMMARY = ROOT / "docs/results/simulate_lr/summary.json"


def test_best_index_is_the_highest_mean_with_ties_to_the_smaller_lr():
    tune = np.array([[0.1, 0.3], [0.5, 0.5], [0.6, 0.4], [0.2, 0.2]])  # means 0.2, 0.5, 0.5, 0.2
    assert lr.best_index(tune) == 1
    assert lr.best_index(np.array([[0.1], [0.3], [0.2]])) == 1


def _results(ebpo_shift: float, seeds: int = 6, tune: int = 3):
    """Synthetic run_cell outputs: every estimator's AUC peaks at grid index 4 on the tuning seeds; on the reporting
    seeds a different lr (index 6) is higher, which the choice must not see."""
    rng = np.random.default_rng(0)
    L = len(GRID)
    out = {}
    for label in ESTIMATORS:
        base = np.zeros((L, tune + seeds))
        base[4, :tune] = 0.5
        base[6, tune:] = 0.9
        base[4, tune:] = 0.4 + rng.normal(0, 0.01, seeds) + (ebpo_shift if label == lr.EBPO else 0.0)
        noise = np.full(seeds, 100.0) * (0.6 if label == lr.EBPO else 1.0) + rng.normal(0, 1, seeds)
        out[label] = {"auc": base, "final": base.copy(), "noise": noise}
    return {"hard": {2: out}}


def _options(seeds=6, tune=3):
    return SimOptions.from_mapping({"seeds": str(seeds), "tune_seeds": str(tune), "G": "2", "grad_draws": "8"})


def test_summary_compares_each_at_its_tuned_lr_with_verdicts_from_the_interval():
    s = lr.summarize(_results(0.05), _options(), 1.0, "cmd")
    assert s["best_lr"]["hard"]["2"]["grpo"] == {"lr": GRID[4], "edge": False}  # tuning seeds, not reporting
    rows = [r for r in s["at_best_lr"] if r["metric"] == "auc"]
    assert {r["baseline"] for r in rows} == set(ESTIMATORS) - {lr.EBPO}
    grpo = next(r for r in rows if r["baseline"] == "grpo")
    assert grpo["diff"] == pytest.approx(0.05, abs=0.02) and grpo["lr"] == grpo["baseline_lr"] == GRID[4]
    assert grpo["verdict"] == "higher" and grpo["holm"]
    cell = s["envelope"]["hard"]["2"]["ebpo"][f"{GRID[6]:g}"]
    assert cell["auc_mean"] == pytest.approx(0.9) and cell["tune_auc_mean"] == 0.0
    same = lr.summarize(_results(0.0), _options(), 1.0, "cmd")
    assert not any(r["holm"] and r["diff"] > 0 for r in same["at_best_lr"])
    assert "no resolved gain" in lr.readme_block(same) and "resolved gains (Holm) at G = 2" in lr.readme_block(s)
    # the gradient noise: geometric mean over seeds, EBPO's over each baseline's paired by seed
    g = s["gradient"]["hard"]["2"]
    assert g["grpo"]["ebpo_ratio"]["ratio"] == pytest.approx(0.6, abs=0.02) and g["grpo"]["ebpo_ratio"]["verdict"] == "lower"
    assert "ebpo_ratio" not in g["ebpo"] and "over GRPO's at the initial policy: 0.60 at G = 2" in lr.readme_block(s)
    # a seed whose draws all gave a zero gradient (too few draws): infinite noise, the cell says n/a
    results = _results(0.05)
    results["hard"][2]["grpo"]["noise"][0] = np.inf
    s = lr.summarize(results, _options(), 1.0, "cmd")
    assert s["gradient"]["hard"]["2"]["grpo"] == {"noise": None} and "| n/a |" in lr.gradient_table(s)
    assert "gradient noise" not in lr.readme_block(s) and "ebpo_ratio" in s["gradient"]["hard"]["2"]["rloo"]


def test_running_prior_never_shrinks_past_one_half():
    """docs/estimator.md: plug-in tau2 >= sigma2 / G in expectation, so S <= 1/2 (running prior, equal G)."""
    import torch

    from verl_ebpo.advantage import EBPOOptions, EBPOPrior, ebpo_advantage

    rng = np.random.default_rng(1)
    for a, b, G in ((0.2, 3.8, 2), (0.5, 1.5, 4), (0.3, 3.0, 8)):
        prior, shrink = EBPOPrior(), []
        for step in range(60):
            p = rng.beta(a, b, 256 // G)
            r = torch.tensor((rng.random((len(p), G)) < p[:, None]).reshape(-1, 1), dtype=torch.float64)
            _, d = ebpo_advantage(r, torch.ones_like(r), np.repeat(np.arange(len(p)), G), prior, EBPOOptions())
            if step >= 10:
                shrink.append(d["ebpo/shrinkage_mean"])
        assert 0.1 < max(shrink) < 0.5, (a, b, G, max(shrink))


@pytest.mark.skipif(not SUMMARY.exists(), reason="no committed lr study")
def test_committed_results_and_docs_blocks_are_rendered_from_the_summary():
    s = json.loads(SUMMARY.read_text())
    assert set(s["envelope"]) == set(lr.REGIMES) and s["seeds"] >= 30
    for per_g in s["envelope"].values():
        for per in per_g.values():
            for cells in per.values():
                assert {"auc_mean", "auc_ci95", "final_mean"} <= set(next(iter(cells.values())))
    assert all(r["verdict"] and len(r["ci95"]) == 2 for r in s["at_best_lr"])
    assert len(lr.readme_block(s).splitlines()) + 1 <= 6  # with the demo's line
    assert s["command"] == "verl-ebpo simulate" and s["gradient"]
    assert (ROOT / "docs/results/simulate_lr/results.md").read_text() == lr.results_markdown(s)
    blocks = lr.doc_blocks(s)
    found = 0
    for doc in ("docs/simulator.md", "README.md"):
        text = (ROOT / doc).read_text()
        for name, body in re.findall(r"<!-- results:simulate_lr:(\w+) -->\n(.*?)\n<!-- /results -->", text, re.S):
            assert body == blocks[name], (doc, name)
            found += 1
    assert found >= 3
