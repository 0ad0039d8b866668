"""EBPO estimator (`ebpo_advantage` over `advantage.core`): hand-computed answers, options, the guards on reward
values (NaN, inf, huge: refused or skipped, never in the prior), and hypothesis properties (no verl needed)."""

import math
from pathlib import Path

import numpy as np
import pytest
import torch
import json

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from verl_ebpo.advantage import EBPOOptions, EBPOPrior, ebpo_advantage
from verl_ebpo.advantage.core import merge_moments, moments
from verl_ebpo.tools.options import markdown_table
from verl_ebpo.advantage.prior import Moments

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


def _batch(scores_per_row, dtype, T=3, pad_rows=1):
    """One group per two rows; each row's tokens carry the given per-token rewards; a trailing padding row
    (mask 0) whose rewards are the largest finite value of the dtype (never counted, never in the output)."""
    n = len(scores_per_row)
    tlr = torch.zeros(n + pad_rows, T, dtype=dtype)
    mask = torch.zeros(n + pad_rows, T, dtype=torch.int64)
    for i, toks in enumerate(scores_per_row):
        tlr[i, : len(toks)] = torch.tensor(toks, dtype=torch.float64).to(dtype)
        mask[i, : len(toks)] = 1
    tlr[n:] = torch.finfo(dtype).max
    index = np.array([f"g{i // 2}" for i in range(n)] + ["pad"] * pad_rows, dtype=object)
    return tlr, mask, index


def _magnitude(dtype):
    """Finite rewards of the dtype from tiny to its largest finite value, both signs."""
    top = torch.finfo(dtype).max
    exp = st.floats(-30, min(math.log10(top), 308.0), allow_nan=False)
    return st.builds(
        lambda sign, e, frac: float(max(-top, min(top, sign * frac * 10.0**e))),
        st.sampled_from([-1.0, 1.0]),
        exp,
        st.floats(0.1, 1.0),
    ) | st.sampled_from([0.0, 1.0, top, -top])


@st.composite
def _case(draw):
    dtype = draw(st.sampled_from(DTYPES))
    rows = draw(st.integers(1, 6))
    T = draw(st.integers(1, 4))
    history = draw(
        st.lists(
            st.lists(st.lists(_magnitude(dtype), min_size=1, max_size=T), min_size=rows, max_size=rows),
            min_size=1,
            max_size=3,
        )
    )
    options = EBPOOptions(
        normalize=draw(st.sampled_from(["batch", "center", "none"])),
        on_nonfinite=draw(st.sampled_from(["error", "skip"])),
        prior_decay=draw(st.sampled_from([1.0, 0.5])),
    )
    return dtype, T, history, options



def batch(groups, T=3, pad_rows=0, dtype=torch.float32):
    """Rows from a list of score lists (one list per group); the score sits on the last valid token."""
    scores = [s for g in groups for s in g]
    index = np.array([f"g{i}" for i, g in enumerate(groups) for _ in g] + ["pad"] * pad_rows, dtype=object)
    n = len(scores) + pad_rows
    tlr = torch.zeros(n, T, dtype=dtype)
    tlr[: len(scores), T - 1] = torch.tensor(scores, dtype=dtype)
    mask = torch.zeros(n, T, dtype=torch.int64)
    mask[: len(scores)] = 1
    return tlr, mask, index


def scalars(adv):
    return adv[:, -1].double()


# --------------------------------------------------------------------------- known answers, by hand


def test_first_call_known_answer_raw():
    # groups: [1,0,0,0] (m=1/4) and [0,0,0,0] (m=0).
    # W_r: 8 scores, mean 1/8, var 1/8 - 1/64 = 7/64.  W_mu: {1/4, 0}: mean 1/8, var 1/64.
    # S = (7/64/4) / (7/64/4 + 1/64) = 7/11.  V_A = 4/11*1/4 + 7/11*1/8 = 15/88,  V_B = 7/88.
    prior = EBPOPrior()
    tlr, mask, index = batch([[1, 0, 0, 0], [0, 0, 0, 0]])
    adv, diag = ebpo_advantage(tlr, mask, index, prior, EBPOOptions(normalize="none"))
    expected = torch.tensor([1 - 15 / 88] + [-15 / 88] * 3 + [-7 / 88] * 4, dtype=torch.float64)
    torch.testing.assert_close(scalars(adv), expected, rtol=0, atol=1e-7)
    assert prior.mu_glob == pytest.approx(1 / 8) and prior.sigma2 == pytest.approx(7 / 64)
    assert prior.tau2 == pytest.approx(1 / 64)
    assert diag["ebpo/shrinkage_mean"] == pytest.approx(7 / 11)
    assert diag["ebpo/equal_reward_group_frac"] == pytest.approx(0.5)
    assert diag["ebpo/zero_adv_frac"] == 0.0
    # the all-fail group is pushed down, unlike GRPO's zero
    assert (scalars(adv)[4:] < 0).all()
    # advantages are broadcast over the response mask, in the rewards' dtype
    assert adv.dtype == torch.float32 and torch.equal(adv[:, 0], adv[:, -1])


def test_second_call_uses_running_prior_updated_first():
    # after [1,0,0,0],[0,0,0,0] comes [1,1,1,1]:
    # W_r: 12 scores, 5 ones: mean 5/12, var 5/12 - 25/144 = 35/144.
    # W_mu: {1/4, 0, 1}: mean 5/12, var (1/16 + 1)/3 - 25/144 = 26/144.
    # S = (35/144/4) / (35/144/4 + 26/144) = 35/139;  V = 104/139 * 1 + 35/139 * 5/12.
    prior = EBPOPrior()
    opts = EBPOOptions(normalize="none")
    ebpo_advantage(*batch([[1, 0, 0, 0], [0, 0, 0, 0]]), prior, opts)
    adv, diag = ebpo_advantage(*batch([[1, 1, 1, 1]]), prior, opts)
    v = 104 / 139 + 35 / 139 * 5 / 12
    torch.testing.assert_close(scalars(adv), torch.full((4,), 1 - v, dtype=torch.float64), rtol=0, atol=1e-7)
    assert prior.sigma2 == pytest.approx(35 / 144) and prior.tau2 == pytest.approx(26 / 144)
    assert diag["ebpo/shrinkage_min"] == pytest.approx(35 / 139)
    assert prior.updates == 2


def test_normalize_batch_and_center_known_answer():
    raw = torch.tensor([1 - 15 / 88] + [-15 / 88] * 3 + [-7 / 88] * 4, dtype=torch.float64)
    centered = raw - raw.mean()
    for mode, expected in [("center", centered), ("batch", centered / (raw.std() + 1e-6 * centered.abs().max()))]:
        adv, _ = ebpo_advantage(*batch([[1, 0, 0, 0], [0, 0, 0, 0]]), EBPOPrior(), EBPOOptions(normalize=mode))
        torch.testing.assert_close(scalars(adv), expected, rtol=0, atol=1e-6)


def test_unequal_group_sizes_and_singletons():
    # groups [1,0] (G=2, m=1/2) and [1] (G=1, m=1).
    # W_r: {1,0,1}: mean 2/3, var 2/9.  W_mu: {1/2, 1}: mean 3/4, var 1/16.
    # S(2) = (1/9)/(1/9 + 1/16) = 16/25; S(1) = (2/9)/(2/9 + 1/16) = 32/41.
    prior = EBPOPrior()
    adv, diag = ebpo_advantage(*batch([[1, 0], [1]]), prior, EBPOOptions(normalize="none"))
    v2 = 9 / 25 * 0.5 + 16 / 25 * 2 / 3
    v1 = 9 / 41 * 1 + 32 / 41 * 2 / 3
    expected = torch.tensor([1 - v2, -v2, 1 - v1], dtype=torch.float64)
    torch.testing.assert_close(scalars(adv), expected, rtol=0, atol=1e-7)
    assert diag["ebpo/shrinkage_min"] == pytest.approx(16 / 25)
    assert diag["ebpo/shrinkage_max"] == pytest.approx(32 / 41)


def test_zero_variance_gives_full_shrinkage_and_zero_advantage():
    # every score equal so far: sigma2 = tau2 = 0 -> denominator <= eps -> S = 1, V = mu_glob, raw = 0
    prior = EBPOPrior()
    adv, diag = ebpo_advantage(*batch([[0, 0], [0, 0]]), prior, EBPOOptions())
    assert torch.count_nonzero(adv) == 0
    assert diag["ebpo/shrinkage_mean"] == 1.0 and diag["ebpo/zero_adv_frac"] == 1.0


@pytest.mark.parametrize("groups, g", [(5, 2), (25, 8), (40, 4), (100, 8)])
@pytest.mark.parametrize("mode", ["batch", "center"])
def test_all_fail_batch_after_a_mixed_one_gives_zero_advantages(mode, groups, g):
    """Every group of the batch fails while mu_glob > 0: raw = -S * mu_glob on every row, the batch is constant, so
    every advantage is 0. (The float64 mean misses raw by ~1e-17; dividing that by ~0 would give +-1e6.)"""
    prior = EBPOPrior()
    rng = np.random.default_rng(0)
    mixed = (rng.random((groups, g)) < 0.3).astype(float).tolist()
    ebpo_advantage(*batch(mixed), prior, EBPOOptions(normalize=mode))
    assert prior.mu_glob > 0
    adv, _ = ebpo_advantage(*batch([[0.0] * g] * groups), prior, EBPOOptions(normalize=mode))
    assert torch.count_nonzero(adv) == 0


def test_prior_decay_known_answer():
    # lam = 1/2. Call 1: W_r over {1,1}: w=2, mean 1, m2 0; W_mu over {1}: w=1, mean 1, m2 0.
    # Call 2 scores {0,0}: W_r: w = 1 + 2 = 3, mean = 1 + (0-1)*2/3 = 1/3, m2 = 0 + 0 + 1*1*2/3 = 2/3.
    #                       W_mu: w = 1/2 + 1 = 3/2, mean = 1 + (0-1)*(1/(3/2)) = 1/3, m2 = 1 * (1/2*1)/(3/2) = 1/3.
    prior = EBPOPrior()
    opts = EBPOOptions(prior_decay=0.5, normalize="none")
    ebpo_advantage(*batch([[1, 1]]), prior, opts)
    ebpo_advantage(*batch([[0, 0]]), prior, opts)
    assert prior.reward == Moments(3.0, pytest.approx(1 / 3), pytest.approx(2 / 3))
    assert prior.group_mean.weight == 1.5 and prior.group_mean.mean == pytest.approx(1 / 3)
    assert prior.tau2 == pytest.approx((1 / 3) / 1.5)


def test_rewards_outside_the_mask_do_not_count():
    tlr, mask, index = batch([[1, 0]])
    tlr[1, 0] = 5.0
    mask[1, 0] = 0  # the 5 sits outside row 1's response
    prior = EBPOPrior()
    ebpo_advantage(tlr, mask, index, prior, EBPOOptions())
    assert prior.mu_glob == pytest.approx(0.5)


# --------------------------------------------------------------------------- bad input


def test_nonfinite_error_leaves_prior_untouched():
    prior = EBPOPrior()
    ebpo_advantage(*batch([[1, 0]]), prior, EBPOOptions())
    before = prior.state_dict()
    tlr, mask, index = batch([[1, 0], [0, 1]])
    tlr[1, -1] = float("nan")
    tlr[2, -1] = float("inf")
    with pytest.raises(ValueError, match=r"2 row\(s\) have a non-finite score"):
        ebpo_advantage(tlr, mask, index, prior, EBPOOptions())
    assert prior.state_dict() == before


def test_nonfinite_skip_counts_and_drops_rows():
    tlr, mask, index = batch([[1, 0, 0], [0, 1]])
    tlr[1, -1] = float("nan")
    prior = EBPOPrior()
    adv, diag = ebpo_advantage(tlr, mask, index, prior, EBPOOptions(on_nonfinite="skip"))
    assert diag["ebpo/skipped_rows"] == 1.0 and torch.isfinite(adv).all()
    assert torch.count_nonzero(adv[1]) == 0
    # the prior saw exactly the four finite scores
    assert prior.reward.weight == 4 and prior.mu_glob == pytest.approx(0.5)


def test_missing_index_and_shape_errors():
    tlr, mask, index = batch([[1, 0]])
    with pytest.raises(ValueError, match="needs `index`"):
        ebpo_advantage(tlr, mask, None, EBPOPrior())
    with pytest.raises(ValueError, match="needs `index`"):
        ebpo_advantage(tlr, mask, np.array(["a", "b", "c"]), EBPOPrior())
    with pytest.raises(AssertionError):  # verl builds both tensors: one assertion
        ebpo_advantage(tlr, mask[:, :2], index, EBPOPrior())
    with pytest.raises(AssertionError):
        ebpo_advantage(tlr[:, 0], mask[:, 0], index, EBPOPrior())


@pytest.mark.parametrize("shape", [(0, 4), (3, 0)])
def test_empty_batch_returns_zeros_and_keeps_prior(shape):
    prior = EBPOPrior()
    ebpo_advantage(*batch([[1, 0]]), prior, EBPOOptions())
    before = prior.state_dict()
    adv, diag = ebpo_advantage(torch.zeros(shape), torch.ones(shape), np.array(["a"] * shape[0]), prior)
    assert adv.shape == shape and torch.count_nonzero(adv) == 0
    assert prior.state_dict() == before


def test_all_padding_batch_returns_zeros_and_keeps_prior():
    prior = EBPOPrior()
    tlr, mask, index = batch([], pad_rows=4)
    adv, diag = ebpo_advantage(tlr, mask, index, prior)
    assert torch.count_nonzero(adv) == 0 and prior.updates == 0 and diag["ebpo/padding_rows"] == 4.0


def test_options_validation():
    with pytest.raises(ValueError, match=r"unknown algorithm.ebpo option\(s\) \['priorscope'\]"):
        EBPOOptions.from_algorithm_config({"ebpo": {"priorscope": "batch"}})
    with pytest.raises(ValueError, match="ebpo.prior_scope must be one of"):
        EBPOOptions.from_algorithm_config({"ebpo": {"prior_scope": "global"}})
    with pytest.raises(ValueError, match=r"ebpo.prior_decay must be a finite number in \(0, 1\]"):
        EBPOOptions.from_algorithm_config({"ebpo": {"prior_decay": 0}})
    with pytest.raises(ValueError, match=r"algorithm.ebpo.prior_decay must be a finite number in \(0, 1\], got 'fast'"):
        EBPOOptions.from_algorithm_config({"ebpo": {"prior_decay": "fast"}})
    with pytest.raises(ValueError, match="ebpo.normalize must be one of"):
        EBPOOptions.from_algorithm_config({"ebpo": {"normalize": "group"}})
    with pytest.raises(ValueError, match="ebpo.on_nonfinite must be one of"):
        EBPOOptions.from_algorithm_config({"ebpo": {"on_nonfinite": "ignore"}})
    with pytest.raises(ValueError, match="ebpo.allow_missing_state must be true or false"):
        EBPOOptions.from_algorithm_config({"ebpo": {"allow_missing_state": "maybe"}})
    with pytest.raises(ValueError, match=r"ebpo.epsilon must be a finite number in \(0, 1\]"):
        EBPOOptions.from_algorithm_config({"ebpo": {"epsilon": 0}})
    assert EBPOOptions.from_algorithm_config(None) == EBPOOptions()
    assert EBPOOptions.from_algorithm_config({"ebpo": {"prior_decay": "0.5", "allow_missing_state": "True"}}) == EBPOOptions(
        prior_decay=0.5, allow_missing_state=True
    )
    assert EBPOOptions.from_algorithm_config({"norm_adv_by_std_in_grpo": False}).normalize == "center"
    explicit = {"norm_adv_by_std_in_grpo": False, "ebpo": {"normalize": "batch"}}
    assert EBPOOptions.from_algorithm_config(explicit).normalize == "batch"


# --------------------------------------------------------------------------- properties

scores_st = st.lists(
    st.lists(st.sampled_from([0.0, 1.0, 0.5, -1.0]), min_size=1, max_size=6), min_size=1, max_size=8
)


@settings(max_examples=60, deadline=None)
@given(history=st.lists(scores_st, min_size=1, max_size=4), pad=st.integers(0, 3))
def test_property_shrinkage_in_unit_interval_and_finite(history, pad):
    prior = EBPOPrior()
    for groups in history:
        adv, diag = ebpo_advantage(*batch(groups, pad_rows=pad), prior, EBPOOptions())
        assert torch.isfinite(adv).all()
        assert 0.0 <= diag["ebpo/shrinkage_min"] <= diag["ebpo/shrinkage_max"] <= 1.0


@settings(max_examples=60, deadline=None)
@given(groups=scores_st, pad=st.integers(1, 4), mode=st.sampled_from(["batch", "center", "none"]))
def test_property_padding_rows_change_nothing(groups, pad, mode):
    p1, p2 = EBPOPrior(), EBPOPrior()
    a1, _ = ebpo_advantage(*batch(groups), p1, EBPOOptions(normalize=mode))
    a2, d2 = ebpo_advantage(*batch(groups, pad_rows=pad), p2, EBPOOptions(normalize=mode))
    assert torch.equal(a2[: len(a1)], a1) and torch.count_nonzero(a2[len(a1) :]) == 0
    assert p1.state_dict() == p2.state_dict() and d2["ebpo/padding_rows"] == pad


@settings(max_examples=60, deadline=None)
@given(groups=scores_st, seed=st.integers(0, 2**31 - 1))
def test_property_row_permutation_permutes_output(groups, seed):
    tlr, mask, index = batch(groups)
    perm = torch.from_numpy(np.random.default_rng(seed).permutation(len(index)))
    a1, _ = ebpo_advantage(tlr, mask, index, EBPOPrior())
    a2, _ = ebpo_advantage(tlr[perm], mask[perm], index[perm.numpy()], EBPOPrior())
    torch.testing.assert_close(a2, a1[perm], rtol=1e-5, atol=1e-6)


@settings(max_examples=60, deadline=None)
@given(history=st.lists(scores_st, min_size=0, max_size=3), groups=scores_st, g=st.integers(1, 8))
def test_property_all_fail_group_gets_negative_advantage(history, groups, g):
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    prior = EBPOPrior()
    for h in history:
        ebpo_advantage(*batch(h), prior, EBPOOptions())
    tlr, mask, index = batch(groups + [[0.0] * g])
    adv, _ = ebpo_advantage(tlr, mask, index, prior, EBPOOptions(normalize="none"))
    fail = slice(len(index) - g, len(index))
    if prior.mu_glob > 0:
        assert (scalars(adv)[fail] < 0).all()
    grpo, _ = compute_grpo_outcome_advantage(tlr, mask, index)
    assert torch.count_nonzero(grpo[fail]) == 0


@settings(max_examples=40, deadline=None)
@given(history=st.lists(scores_st, min_size=1, max_size=4))
def test_property_batch_scope_equals_fresh_running_prior(history):
    running = EBPOPrior()
    scoped = EBPOPrior()
    for groups in history:
        fresh = EBPOPrior()
        a_fresh, _ = ebpo_advantage(*batch(groups), fresh, EBPOOptions())
        a_scoped, _ = ebpo_advantage(*batch(groups), scoped, EBPOOptions(prior_scope="batch"))
        ebpo_advantage(*batch(groups), running, EBPOOptions())
        assert torch.equal(a_fresh, a_scoped)
        assert scoped.reward == fresh.reward and scoped.group_mean == fresh.group_mean


@settings(max_examples=40, deadline=None)
@given(history=st.lists(scores_st, min_size=1, max_size=5))
def test_property_no_decay_is_plain_welford_over_everything_seen(history):
    prior = EBPOPrior()
    all_scores, all_means = [], []
    for groups in history:
        ebpo_advantage(*batch(groups), prior, EBPOOptions(prior_decay=1.0))
        all_scores += [s for g in groups for s in g]
        all_means += [float(np.mean(g)) for g in groups]
    assert prior.reward.weight == len(all_scores)
    assert prior.mu_glob == pytest.approx(np.mean(all_scores), abs=1e-12)
    assert prior.sigma2 == pytest.approx(np.var(all_scores), abs=1e-12)
    assert prior.tau2 == pytest.approx(np.var(all_means), abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(
    chunks=st.lists(st.lists(st.floats(-10, 10), min_size=1, max_size=20), min_size=1, max_size=6),
    lam=st.floats(0.05, 1.0),
)
def test_property_decayed_merge_equals_weighted_moments(chunks, lam):
    # with decay, chunk j (of k) carries weight lam**(k-1-j): the merge must equal the weighted moments.
    acc = torch.zeros(3, dtype=torch.float64)
    for c in chunks:
        acc = merge_moments(acc, moments(torch.tensor(c, dtype=torch.float64)), lam)
    weight, mean_, m2 = acc.tolist()
    k = len(chunks)
    x = np.concatenate([np.asarray(c) for c in chunks])
    w = np.concatenate([np.full(len(c), lam ** (k - 1 - j)) for j, c in enumerate(chunks)])
    mean = np.sum(w * x) / np.sum(w)
    assert weight == pytest.approx(np.sum(w))
    assert mean_ == pytest.approx(mean, abs=1e-9)
    assert m2 == pytest.approx(np.sum(w * (x - mean) ** 2), abs=1e-7, rel=1e-9)


def test_readme_options_table_is_the_spec():
    """The README's option table is rendered from EBPOOptions' declarations (one definition)."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert markdown_table(EBPOOptions) in readme


# --------------------------------------------------------------------------- the degenerate-S rule is unit-free


def test_small_unit_rewards_keep_the_paper_shrinkage():
    """Rewards in [0, 0.001]: the same S = 7/11 as 0/1 rewards."""
    for c in (1.0, 1e-3, 1e-6):
        prior = EBPOPrior()
        tlr, mask, index = batch([[c, 0, 0, 0], [0, 0, 0, 0]], dtype=torch.float64)
        adv, diag = ebpo_advantage(tlr, mask, index, prior, EBPOOptions(normalize="none"))
        assert diag["ebpo/shrinkage_mean"] == pytest.approx(7 / 11, rel=1e-12), c
        expected = c * torch.tensor([1 - 15 / 88] + [-15 / 88] * 3 + [-7 / 88] * 4, dtype=torch.float64)
        torch.testing.assert_close(scalars(adv), expected, rtol=1e-12, atol=0)


@settings(max_examples=60, deadline=None)
@given(
    calls=st.lists(
        st.lists(st.lists(st.floats(0, 1, allow_nan=False), min_size=1, max_size=6), min_size=1, max_size=4),
        min_size=1, max_size=3,
    ),
    log_c=st.floats(-6, 6),
    mode=st.sampled_from(["none", "center", "batch"]),
)
def test_advantages_do_not_depend_on_the_rewards_unit(calls, log_c, mode):
    """Every reward times c in [1e-6, 1e6]: S is the same and the advantages scale by c (normalize none/center)
    or do not change at all (`batch`: its epsilon is relative to the batch's largest |raw|)."""
    c = 10.0 ** log_c
    p1, pc = EBPOPrior(), EBPOPrior()
    for groups in calls:
        tlr, mask, index = batch(groups, dtype=torch.float64)
        a1, d1 = ebpo_advantage(tlr, mask, index, p1, EBPOOptions(normalize=mode))
        ac, dc = ebpo_advantage(tlr * c, mask, index, pc, EBPOOptions(normalize=mode))
        for key in ("ebpo/shrinkage_mean", "ebpo/shrinkage_min", "ebpo/shrinkage_max"):
            assert dc[key] == pytest.approx(d1[key], rel=1e-9, abs=1e-9), key
        scale = float(scalars(a1).abs().max()) + float(tlr.abs().max())
        unit = 1.0 if mode == "batch" else c
        torch.testing.assert_close(scalars(ac) / unit, scalars(a1), rtol=0, atol=1e-9 * max(scale, 1e-300))


# --------------------------------------------------------------------------- reward values no prior can hold


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_case())
# bfloat16, every row skipped (two tokens of 3.39e38 sum to inf in bfloat16): the early return keeps the dtype
@example((torch.bfloat16, 2, [[[3.39e38, 3.39e38]]], EBPOOptions(on_nonfinite="skip")))
def test_property_no_nan_no_inf_no_poisoned_prior_for_any_finite_reward(case):
    """Any finite rewards a reward function can return, any dtype: the output is finite with normalize=batch
    (`center`/`none` keep raw score differences, which may exceed the rewards' dtype), padding rows and tokens outside
    the mask exactly 0, the prior finite and saveable; a row whose score is not finite in the rewards' precision or
    beyond 1e100 is refused (the prior exactly as it was) or skipped (0, counted)."""
    dtype, T, history, options = case
    prior = EBPOPrior()
    for rows in history:
        tlr, mask, index = _batch(rows, dtype, T)
        before = prior.state_dict()
        try:
            adv, diag = ebpo_advantage(tlr, mask, index, prior, options)
        except ValueError as e:
            assert options.on_nonfinite == "error", e
            assert "non-finite score" in str(e) and "the prior was not updated" in str(e)
            assert prior.state_dict() == before
            continue
        assert adv.dtype == dtype and (options.normalize != "batch" or adv.isfinite().all())
        assert torch.count_nonzero(adv[len(rows):]) == 0  # padding row: exactly 0
        fits = adv.isfinite().all(-1)  # rows whose advantage fits the dtype: exactly 0 outside the mask
        assert torch.count_nonzero(adv[fits][mask[fits] == 0]) == 0
        assert prior.is_finite()
        assert all(math.isfinite(v) for v in diag.values())
        json.dumps(prior.state_dict(), allow_nan=False)  # saveable


@pytest.mark.parametrize("mode", ["batch", "center", "none"])
def test_a_skipped_row_is_exactly_zero_on_every_call_with_a_prior_behind_it(mode):
    """A row skipped for a non-finite score gets advantage exactly 0 on the first call and on later ones, where the
    prior is not empty and the centring would otherwise move it (rows 0 and 4 below are NaN / inf)."""
    prior = EBPOPrior()
    options = EBPOOptions(on_nonfinite="skip", normalize=mode)
    for call in range(3):
        rewards = torch.tensor([[float("nan")], [1.0], [0.0], [1.0], [float("inf")], [0.0]], dtype=torch.float32)
        rewards[1:4] += 0.1 * call
        mask = torch.ones(6, 1, dtype=torch.int64)
        index = np.array(["a", "a", "b", "b", "c", "c"], dtype=object)
        adv, diag = ebpo_advantage(rewards, mask, index, prior, options)
        assert diag["ebpo/skipped_rows"] == 2.0
        assert adv[0].item() == 0.0 and adv[4].item() == 0.0, (call, adv.reshape(-1).tolist())
        assert torch.count_nonzero(adv[[1, 2, 3, 5]]) > 0
    assert prior.reward.weight == 12.0  # 4 valid rows a call, none of the skipped ones


def test_float64_scores_beyond_the_bound_are_refused_or_skipped_and_the_prior_stays_finite():
    rewards = torch.tensor([[1e155], [-1e155], [0.0], [1.0]], dtype=torch.float64)
    mask = torch.ones(4, 1, dtype=torch.int64)
    index = np.array(["a", "a", "b", "b"], dtype=object)
    prior = EBPOPrior()
    with pytest.raises(ValueError, match=r"2 row\(s\) have a non-finite score .* \|score\| > 1e\+100.*rows \[0, 1\]"):
        ebpo_advantage(rewards, mask, index, prior)
    assert prior.state_dict() == EBPOPrior().state_dict()
    adv, diag = ebpo_advantage(rewards, mask, index, prior, EBPOOptions(on_nonfinite="skip"))
    assert diag["ebpo/skipped_rows"] == 2.0 and adv[:2].abs().sum() == 0
    # the two rows left: group b = {0, 1}; the prior holds exactly them
    assert (prior.reward.weight, prior.mu_glob, prior.sigma2) == (2.0, 0.5, 0.25)
    assert torch.isfinite(adv).all()


def test_a_float64_row_sum_that_overflows_is_a_nonfinite_row():
    top = torch.finfo(torch.float64).max
    rewards = torch.tensor([[top, top], [0.0, 1.0]], dtype=torch.float64)
    mask = torch.ones(2, 2, dtype=torch.int64)
    with pytest.raises(ValueError, match=r"1 row\(s\) have a non-finite score"):
        ebpo_advantage(rewards, mask, np.array(["a", "b"], dtype=object), EBPOPrior())


def test_epsilon_zero_is_refused_and_an_all_equal_batch_is_finite():
    with pytest.raises(ValueError, match=r"epsilon must be a finite number in \(0, 1\]"):
        EBPOOptions(epsilon=0.0)
    adv, diag = ebpo_advantage(torch.ones(4, 2), torch.ones(4, 2, dtype=torch.int64),
                               np.array(["a", "a", "b", "b"]), EBPOPrior(), EBPOOptions(epsilon=1e-12))
    assert torch.count_nonzero(adv) == 0 and diag["ebpo/shrinkage_min"] == 1.0


def test_group_labels_of_any_kind_give_the_same_advantages():
    """Groups are found by verl's `as_torch_index`: str uids (verl's), ints with gaps and out of order, or a tensor
    give the same groups, so the same advantages and prior."""
    tlr, mask, _ = batch([[1, 0, 0], [1, 1], [0, 1, 1, 0]])
    labels = [["u7", "u7", "u7", "a", "a", "z", "z", "z", "z"], [900, 900, 900, 3, 3, 41, 41, 41, 41],
              torch.tensor([2, 2, 2, 0, 0, 1, 1, 1, 1])]
    runs = [ebpo_advantage(tlr, mask, index, EBPOPrior(), EBPOOptions(normalize="none")) for index in labels]
    for adv, diag in runs[1:]:
        torch.testing.assert_close(adv, runs[0][0], rtol=0, atol=0)
        assert diag == runs[0][1]
    assert runs[0][1]["ebpo/shrinkage_min"] < runs[0][1]["ebpo/shrinkage_max"]  # groups of 2, 3, 4: three groups seen
