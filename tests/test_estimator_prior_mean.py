"""When does EBPO's prior mean mu_glob matter? (the formula text in README, docs/estimator.md, advantage/math.py)

Stated identity: with equal group sizes and normalize=batch|center, mu_glob cancels, and
    A_i = (1 - S) (r_i - m_q) + S (r_i - rbar)        (center; divided by the batch std + epsilon under batch)
so an all-fail group gets -S rbar (/ std), 0 when every group of the batch fails. With unequal group sizes, or
normalize=none, the advantages depend on mu_glob. Checked through the real estimator (`ebpo_advantage`, which
merges the batch into the prior first): two priors with different means but the same merged sigma2 and tau2
(so the same S) are compared.
"""

import numpy as np
import pytest
import torch

from verl_ebpo.advantage import EBPOOptions, EBPOPrior, ebpo_advantage
from verl_ebpo.advantage.core import moments
from verl_ebpo.advantage.prior import Moments

W, K = 50.0, 40.0  # prior weight; merged reward m2 (fixed, so sigma2 does not depend on mu)


def rows(groups):
    scores = torch.tensor([s for g in groups for s in g], dtype=torch.float64)
    index = np.array([f"g{i}" for i, g in enumerate(groups) for _ in g], dtype=object)
    return scores[:, None], torch.ones(len(scores), 1, dtype=torch.int64), index


def prior_with_mean(mu: float, groups) -> EBPOPrior:
    """A prior whose mean is `mu` and whose reward m2 is set so that, after this batch is merged, sigma2 is the
    same whatever mu is (Chan's merge adds (batch mean - mu)^2 W n / (W + n) to m2)."""
    scores = torch.tensor([s for g in groups for s in g], dtype=torch.float64)
    b = Moments(*moments(scores).tolist())
    m2 = K - b.m2 - (b.mean - mu) ** 2 * W * b.weight / (W + b.weight)
    assert m2 >= 0
    return EBPOPrior(reward=Moments(W, mu, m2), group_mean=Moments(20.0, 0.3, 1.2))


def advantages(mu: float, groups, normalize: str):
    tlr, mask, index = rows(groups)
    prior = prior_with_mean(mu, groups)
    opts = EBPOOptions(normalize=normalize)
    adv, _ = ebpo_advantage(tlr, mask, index, prior, opts)
    return adv[:, 0].double(), prior, opts


EQUAL = [[0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]]
UNEQUAL = [[0.0, 0.0], [1.0, 0.0, 1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]


@pytest.mark.parametrize("normalize", ["batch", "center"])
def test_equal_group_sizes_mu_glob_cancels_and_the_closed_form_holds(normalize):
    a1, p1, opts = advantages(0.1, EQUAL, normalize)
    a2, p2, _ = advantages(0.6, EQUAL, normalize)
    assert abs(p1.mu_glob - p2.mu_glob) > 0.2 and p1.sigma2 == pytest.approx(p2.sigma2, abs=1e-12)
    assert torch.allclose(a1, a2, atol=1e-12, rtol=0)  # mu_glob changed by > 0.2: the advantages did not
    G = len(EQUAL[0])
    S = p1.shrinkage_for(G, opts.epsilon)
    assert 0.05 < S < 0.95
    r = torch.tensor(EQUAL, dtype=torch.float64)
    centred = (1 - S) * (r - r.mean(1, keepdim=True)) + S * (r - r.mean())  # (1-S)(group-centred) + S(batch-centred)
    expected = centred.reshape(-1)
    if normalize == "batch":
        denom = expected.std(unbiased=True) + opts.epsilon * expected.abs().max()  # epsilon relative to max|centred|
        expected = expected / denom
        fail = -S * r.mean() / denom
    else:
        fail = -S * r.mean()
    tol = 1e-12
    assert torch.allclose(a1, expected, atol=tol, rtol=0)
    assert torch.allclose(a1[:G], torch.full((G,), float(fail), dtype=torch.float64), atol=tol)  # the all-fail group
    assert float(a1[:G].max()) < 0


def test_every_group_failing_gives_zero_under_batch_normalisation():
    groups = [[0.0] * 4] * 3
    tlr, mask, index = rows(groups)
    prior = EBPOPrior(reward=Moments(W, 0.4, 10.0), group_mean=Moments(20.0, 0.3, 1.2))
    adv, _ = ebpo_advantage(tlr, mask, index, prior, EBPOOptions(normalize="batch"))
    assert torch.equal(adv, torch.zeros_like(adv))
    adv_none, _ = ebpo_advantage(tlr, mask, index,
                                 EBPOPrior(reward=Moments(W, 0.4, 10.0), group_mean=Moments(20.0, 0.3, 1.2)),
                                 EBPOOptions(normalize="none"))
    assert float(adv_none.max()) < -1e-3  # without normalisation the prior mean still pushes them down


@pytest.mark.parametrize("groups, normalize", [(UNEQUAL, "batch"), (UNEQUAL, "center"), (EQUAL, "none")])
def test_unequal_sizes_or_no_normalisation_mu_glob_matters(groups, normalize):
    a1, p1, _ = advantages(0.1, groups, normalize)
    a2, p2, _ = advantages(0.6, groups, normalize)
    assert p1.sigma2 == pytest.approx(p2.sigma2, abs=1e-12)  # same S: only mu_glob differs
    assert float((a1 - a2).abs().max()) > 1e-2
