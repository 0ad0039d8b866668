"""The simulator's mechanism measurement (gradient noise against the exact gradient), the James-Stein baseline,
and the progress bar."""

import numpy as np
import pytest
import torch

from verl_ebpo.tools import cli
from verl_ebpo.tools.simulate.estimators import AdvantageCaller, james_stein_advantage, parse_estimator
from verl_ebpo.tools.simulate import gradient
from verl_ebpo.tools.simulate.gradient import exact_gradient, measure
from verl_ebpo.tools.simulate.options import SimOptions
from verl_ebpo.tools.simulate import task as simtask

SMALL = dict(G=(2,), seeds=3, prompts=48, steps=2, answers_per_step=32, features=4, grad_warmup=4)
HARD = (0.3, 3.0)  # p0 ~ Beta(A, B)


def js_reference(r: np.ndarray, epsilon: float = 1e-6) -> np.ndarray:
    """The authors' loop (JSPO-Official `compute_jspo_outcome_advantage`), transcribed row by row."""
    n, m = r.shape
    adv = np.zeros_like(r)
    for j in range(n):
        others = [k for k in range(n) if k != j]
        means = np.array([r[k].mean() for k in others])
        v2 = np.mean([r[k].var(ddof=1) / m for k in others])
        mbar = means.mean()
        s2 = np.mean((means - mbar) ** 2)
        lam = v2 / (v2 + s2 + epsilon)
        batch_mean = r[others].mean()
        for i in range(m):
            rloo = (r[j].sum() - r[j, i]) / (m - 1)
            adv[j, i] = r[j, i] - (rloo * (1 - lam) + batch_mean * lam)
    return adv


@pytest.mark.parametrize("n, m, seed", [(2, 2, 0), (5, 4, 1), (9, 8, 2), (4, 3, 3)])
def test_james_stein_equals_the_authors_loop(n, m, seed):
    r = (np.random.default_rng(seed).random((n, m)) < 0.3).astype(np.float64)
    r[0] = 0.0  # an all-fail group
    rewards = torch.from_numpy(r.reshape(-1, 1))
    adv, ret = james_stein_advantage(rewards, torch.ones_like(rewards), np.repeat(np.arange(n), m))
    np.testing.assert_allclose(adv[:, 0].numpy().reshape(n, m), js_reference(r), atol=1e-12)
    assert torch.equal(adv, ret)


def test_james_stein_baseline_does_not_depend_on_the_answers_own_reward():
    """b_ij = r_ij - A_ij is built from the other answers only (what keeps the gradient unbiased)."""
    r = (np.random.default_rng(5).random((6, 4)) < 0.4).astype(np.float64)
    idx = np.repeat(np.arange(6), 4)
    for j, i in [(0, 0), (3, 2), (5, 3)]:
        flipped = r.copy()
        flipped[j, i] = 1.0 - flipped[j, i]
        base = [(x - james_stein_advantage(torch.from_numpy(x.reshape(-1, 1)), torch.ones(24, 1), idx)[0][:, 0]
                 .numpy().reshape(6, 4))[j, i] for x in (r, flipped)]
        assert base[0] == pytest.approx(base[1], abs=1e-12)


def test_james_stein_refuses_unequal_or_single_answer_groups():
    with pytest.raises(ValueError, match="equal groups"):
        james_stein_advantage(torch.ones(5, 1), torch.ones(5, 1), np.array([0, 0, 1, 1, 1]))
    with pytest.raises(ValueError, match="equal groups"):
        james_stein_advantage(torch.ones(3, 1), torch.ones(3, 1), np.array([0, 1, 2]))


def test_js_is_an_estimator_of_the_simulator_called_per_seed():
    spec = parse_estimator("james_stein")
    assert spec.base == "js" and spec.per_seed and spec.verl_name is None
    scores = torch.from_numpy((np.random.default_rng(0).random((6, 4)) < 0.4).astype(np.float64))
    seeds = torch.tensor([0, 0, 0, 1, 1, 1])
    adv = AdvantageCaller(spec, 2)(scores, seeds, 4).reshape(6, 4)
    for s in (0, 1):
        rows = scores[3 * s: 3 * s + 3]
        alone = james_stein_advantage(rows.reshape(-1, 1), torch.ones(12, 1), np.repeat(np.arange(3), 4))[0]
        assert torch.allclose(adv[3 * s: 3 * s + 3].reshape(-1), alone[:, 0], atol=1e-12)


def _measure(label, draws=64, score_noise=0.0):
    """`measure` on SMALL's task with `draws` draws and sigma_n = `score_noise` (the study's is SCORE_NOISE)."""
    o = SimOptions(**{**SMALL, "grad_draws": draws})
    task = simtask.make_task(o.seed_list, o.prompts, HARD, o.features, o.erosion)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(gradient, "SCORE_NOISE", score_noise)
        return measure(task, parse_estimator(label), o.G[0], o), task, o


def test_exact_gradient_is_the_derivative_of_expected_success():
    o = SimOptions(**SMALL)
    task = simtask.make_task(o.seed_list, o.prompts, HARD, o.features, o.erosion)
    theta = torch.zeros(3, task.n_params, dtype=torch.float64, requires_grad=True)
    simtask.expected_success(task, theta).sum().backward()
    assert torch.allclose(exact_gradient(task, torch.zeros_like(theta)), theta.grad, atol=1e-14)


def test_gradient_noise_is_scale_free_rloo_equals_drgrpo():
    """RLOO's advantage is G/(G-1) times Dr.GRPO's on the same rewards (common random numbers): the same noise
    and cosines, while their scales differ."""
    rloo, drgrpo = _measure("rloo")[0], _measure("drgrpo")[0]
    np.testing.assert_allclose(rloo.noise, drgrpo.noise, rtol=1e-9)
    np.testing.assert_allclose(rloo.cos_mean, drgrpo.cos_mean, rtol=1e-9)
    assert np.all(drgrpo.cos_mean > 0.95)  # unbiased: the mean step points along the exact gradient
    assert np.all(rloo.answers == 1.0)


def test_score_noise_adds_a_term_in_sigma_squared_and_nothing_else():
    """With sigma_n > 0 the noise grows by sigma_n^2 (n_shared + 1) E[sum A^2] / N^2 / |E g|^2 and the gradient
    part is untouched (the same draws): the excess at sigma_n = 2 is exactly 4 times the excess at sigma_n = 1."""
    clean = _measure("drgrpo", draws=16)[0]
    one = _measure("drgrpo", draws=16, score_noise=1.0)[0]
    two = _measure("drgrpo", draws=16, score_noise=2.0)[0]
    assert np.all(one.noise > clean.noise)
    np.testing.assert_allclose(two.cos_mean, clean.cos_mean, rtol=1e-12)
    np.testing.assert_allclose(two.noise - clean.noise, 4 * (one.noise - clean.noise), rtol=1e-9)


def test_dapo_trains_on_informative_groups_and_pays_in_answers():
    dapo = _measure("dapo")[0]
    assert np.all(dapo.answers > 1.0)  # hard prompts: more than one generation batch per training batch


def test_ebpo_has_less_gradient_noise_than_drgrpo_at_g2_on_hard_prompts():
    """The measured mechanism (docs/simulator.md, "Gradient"): at G = 2 on hard prompts, EBPO's baseline lowers
    the noise of the gradient; paired by seed, on the same rewards."""
    ebpo, drgrpo = _measure("ebpo")[0], _measure("drgrpo")[0]
    assert np.all(ebpo.noise < 0.9 * drgrpo.noise), (ebpo.noise, drgrpo.noise)


def test_progress_bar_on_stderr_counts_cells(tmp_path, capsys):
    argv = ["simulate", "--out", str(tmp_path / "s"), "--G", "2", "4", "--seeds", "2",
            "--tune-seeds", "1", "--lr-grid", "1", "--steps", "2", "--prompts", "16",
            "--answers-per-step", "8", "--estimators", "grpo", "ebpo", "--grad-draws", "2", "--no-figure"]
    assert cli.main(argv) == 0
    err = capsys.readouterr().err
    assert "simulate: 100%" in err and "8/8" in err and "<" in err  # 2 regimes x 2 G x 2: done of total, time left
    assert cli.main([*argv, "--quiet"]) == 0
    assert "cells" not in capsys.readouterr().err
