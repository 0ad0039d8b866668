"""Hardening of the estimator and the prior: extreme magnitudes in every float dtype, masks that are not 0/1,
group labels that would merge or split groups, non-tensor inputs, and prior states that must never hold or
load a non-finite or malformed value. Each test is one finding of issue 11."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from verl_ebpo.advantage import EBPOOptions, EBPOPrior, ebpo_advantage
from verl_ebpo.advantage.math import MAX_ABS_SCORE, Moments

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


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_case())
def test_property_no_nan_no_inf_no_poisoned_prior_for_any_finite_input(case):
    """Any finite rewards, any dtype: the output is finite, padding and tokens outside the mask are exactly 0,
    the prior stays finite and saveable; a refusal (only possible for float64 scores beyond 1e100 or a float64
    row sum that overflows) leaves the prior exactly as it was."""
    dtype, T, history, options = case
    prior = EBPOPrior()
    for rows in history:
        tlr, mask, index = _batch(rows, dtype, T)
        before = prior.state_dict()
        exact = [sum(Fraction(float(torch.tensor(v, dtype=torch.float64).to(dtype))) for v in toks) for toks in rows]
        too_big = [abs(x) > Fraction(MAX_ABS_SCORE) for x in exact]
        try:
            adv, diag = ebpo_advantage(tlr, mask, index, prior, options)
        except ValueError as e:
            assert dtype == torch.float64 and any(too_big) and options.on_nonfinite == "error", e
            assert "non-finite score" in str(e) and "the prior was not updated" in str(e)
            assert prior.state_dict() == before
            continue
        assert not any(too_big) or dtype == torch.float64  # other dtypes never exceed the bound
        assert adv.dtype == dtype and torch.isfinite(adv).all()
        assert torch.count_nonzero(adv[len(rows):]) == 0  # padding row: exactly 0, never 0 * inf
        assert torch.count_nonzero(adv[mask == 0]) == 0  # tokens outside the mask: exactly 0
        assert diag["ebpo/skipped_rows"] == sum(too_big)
        for i, skip in enumerate(too_big):
            if skip:
                assert torch.count_nonzero(adv[i]) == 0
        assert prior.is_finite()
        assert all(math.isfinite(v) for v in diag.values())
        json.dumps(prior.state_dict(), allow_nan=False)  # saveable


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


def test_float32_and_bfloat16_row_sums_that_overflow_are_summed_exactly_in_float64():
    for dtype in (torch.float32, torch.bfloat16):
        big = float(torch.tensor(3e38, dtype=dtype))
        rewards = torch.tensor([[big, big], [0.0, 0.0]], dtype=dtype)
        mask = torch.ones(2, 2, dtype=torch.int64)
        prior = EBPOPrior()
        adv, _ = ebpo_advantage(rewards, mask, np.array(["a", "b"], dtype=object), prior)
        assert prior.mu_glob == pytest.approx(big)  # (2 * big + 0) / 2, not inf
        assert torch.isfinite(adv).all()


def test_nan_or_inf_reward_outside_the_mask_does_not_count():
    rewards = torch.tensor([[1.0, float("nan")], [0.0, float("inf")]], dtype=torch.float32)
    mask = torch.tensor([[1, 0], [1, 0]])
    prior = EBPOPrior()
    adv, diag = ebpo_advantage(rewards, mask, np.array(["a", "a"], dtype=object), prior)
    assert diag["ebpo/skipped_rows"] == 0 and prior.mu_glob == 0.5
    assert torch.isfinite(adv).all() and adv[0, 1] == 0 and adv[1, 1] == 0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_advantage_beyond_the_dtype_range_saturates_and_is_counted(dtype):
    """normalize=none keeps the raw score difference, which need not fit a half/single-precision output."""
    top = torch.finfo(dtype).max
    rewards = torch.zeros(6, 4, dtype=dtype)
    rewards[0] = top  # row score 4 * top: finite in float64, not in dtype
    mask = torch.ones(6, 4, dtype=torch.int64)
    mask[5] = 0  # padding row
    index = np.array(["a", "a", "a", "a", "b", "pad"], dtype=object)
    # by hand (t = top): scores {4t, 0, 0, 0 | 0}: mu 0.8t, sigma2 2.56t^2; group means {t, 0}: tau2 0.25t^2;
    # S_a = 0.64 / 0.89, V_a = (1 - S_a) t + S_a 0.8t ~ 0.856t, raw_0 = 4t - V_a ~ 3.14t > t
    adv, diag = ebpo_advantage(rewards, mask, index, EBPOPrior(), EBPOOptions(normalize="none"))
    assert torch.isfinite(adv).all() and torch.count_nonzero(adv[5]) == 0
    assert diag["ebpo/saturated_rows"] == 1.0
    assert (adv[0] == top).all()  # clamped to the largest finite value, sign kept
    s_a = 0.64 / 0.89
    v_a = (1 - s_a) * 1.0 + s_a * 0.8
    torch.testing.assert_close(adv[1].double() / top, torch.full((4,), -v_a, dtype=torch.float64), rtol=1e-2, atol=0)


def test_saturated_rows_are_summed_in_the_logged_metrics():
    from verl_ebpo.advantage import verl_glue

    verl_glue.drain_metrics()
    verl_glue.record_metrics({"ebpo/saturated_rows": 2.0})
    verl_glue.record_metrics({"ebpo/saturated_rows": 3.0})
    assert verl_glue.drain_metrics()["ebpo/saturated_rows"] == 5.0


# ------------------------------------------------------------------------------------------- masks


@pytest.mark.parametrize(
    "value, shown",
    [(2, "holds 2"), (-1, "holds -1"), (0.5, "holds 0.5"), (float("nan"), "holds nan"), (1.5, "holds 1.5")],
)
def test_mask_values_other_than_0_and_1_are_refused(value, shown):
    rewards = torch.ones(3, 2)
    mask = torch.ones(3, 2, dtype=torch.float32 if isinstance(value, float) else torch.int64)
    mask[1, 1] = value
    prior = EBPOPrior()
    with pytest.raises(ValueError, match=r"response_mask must hold only 0 and 1, but 1 row\(s\) hold other values") as e:
        ebpo_advantage(rewards, mask, np.array(["a", "a", "b"], dtype=object), prior)
    assert f"row 1 {shown}" in str(e.value)
    assert prior.updates == 0


@pytest.mark.parametrize("rewards_dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize(
    "mask_dtype, value",
    [
        (torch.float32, 1 - 2**-24),  # the float32 just below 1
        (torch.float32, 2**-149),  # the smallest positive float32
        (torch.float32, float("inf")),
        (torch.float64, 1 + 1e-12),  # rounds to 1 in float32/bfloat16 outputs: still refused
        (torch.float16, 0.5),
        (torch.int64, 2**40),
        (torch.int32, -(2**31)),
        (torch.uint8, 255),
    ],
)
def test_the_fused_mask_check_refuses_near_misses_in_any_dtype_pair(rewards_dtype, mask_dtype, value):
    """The one-pass check (aminmax for integers, m - m*m for a float mask of the rewards' dtype, mask != 0 compared
    with the mask for other floats) refuses every value other than 0/1, whatever the mask's and the rewards'
    dtypes, with the prior untouched."""
    rewards = torch.ones(3, 4, dtype=rewards_dtype)
    mask = torch.ones(3, 4, dtype=mask_dtype)
    mask[2, 3] = value
    prior = EBPOPrior()
    with pytest.raises(ValueError, match=r"response_mask must hold only 0 and 1, but 1 row\(s\) hold other values"):
        ebpo_advantage(rewards, mask, np.array(["a", "a", "b"], dtype=object), prior)
    assert prior.updates == 0


def test_negative_zero_in_a_float_mask_counts_as_zero():
    rewards = torch.tensor([[1.0, 5.0], [0.0, 5.0], [1.0, 0.0]])
    mask = torch.tensor([[1.0, -0.0], [1.0, -0.0], [1.0, 1.0]])
    index = np.array(["a", "a", "b"], dtype=object)
    adv, _ = ebpo_advantage(rewards, mask, index, EBPOPrior())
    ref, _ = ebpo_advantage(rewards, (mask != 0).to(torch.int64), index, EBPOPrior())
    assert torch.equal(adv, ref) and adv[0, 1] == 0


@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.int64, torch.int32, torch.float32, torch.float64])
def test_zero_one_masks_of_every_dtype_give_the_same_advantage(mask_dtype):
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0], [1.0, 0.0], [0.0, 0.0]])
    mask = torch.tensor([[1, 1], [1, 0], [1, 1], [0, 0]]).to(mask_dtype)
    index = np.array(["a", "a", "b", "pad"], dtype=object)
    ref, _ = ebpo_advantage(rewards, mask.to(torch.int64), index, EBPOPrior())
    adv, _ = ebpo_advantage(rewards, mask, index, EBPOPrior())
    assert torch.equal(adv, ref)


def _long_float_batch(dtype, T=4096):
    """6 rows of T tokens in one dtype (rewards and mask, the fast float path): mostly ones, rows of different
    lengths, row 4 all ones, row 5 padding; integer rewards (exact sums in any order)."""
    lengths = torch.tensor([T, T - 1, T // 2, 1, T, 0])
    mask = (torch.arange(T)[None, :] < lengths[:, None]).to(dtype)
    rewards = (torch.arange(6 * T, dtype=dtype).reshape(6, T) % 3) - 1
    return rewards, mask, np.array(["a", "a", "b", "b", "c", "pad"], dtype=object)


def _dtype_near_misses(dtype):
    info = torch.finfo(dtype)
    tiny = 2.0**-149 if dtype == torch.float32 else 2.0**-1074  # the smallest denormal
    return [0.5, 1 - 2.0**-24, 2.0**-149, 1 - info.eps / 2, 1 + info.eps, tiny, -tiny, info.tiny, -0.5, -1.0, 2.0,
            info.max, float("nan"), float("inf"), float("-inf")]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("where", [(0, 0), (1, 2000), (2, 4095), (3, 4000), (4, 4095), (5, 17)])
def test_one_bad_value_anywhere_in_a_long_float_row_is_refused(dtype, where):
    """A float32/float64 mask of the rewards' dtype, 4096 tokens a row, one value that is not 0/1 (a fraction
    just below 1, the smallest denormal, NaN, +-inf, negatives, > 1) inside a response, in a row's zero tail or
    in a padding row: refused, whichever row holds it, with the prior untouched."""
    for value in _dtype_near_misses(dtype):
        rewards, mask, index = _long_float_batch(dtype)
        mask[where] = value
        assert mask[where].item() == value or math.isnan(value)  # stored exactly in the mask's dtype
        prior = EBPOPrior()
        with pytest.raises(ValueError, match=rf"but 1 row\(s\) hold other values \(e.g. row {where[0]} holds"):
            ebpo_advantage(rewards, mask, index, prior)
        assert prior.updates == 0, value


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fractions_that_offset_each_other_in_sums_are_refused(dtype):
    """2**-149 and 1 - 2**-24 in place of two ones: their float32 bit patterns add up to 1.0's and the float32 row
    sum rounds to an integer, as if the row held a 1 and a 0, so a check by sums would pass them."""
    rewards, mask, index = _long_float_batch(dtype)
    mask[0, 10], mask[0, 11] = 2.0**-149, 1 - 2.0**-24
    if dtype == torch.float32:
        assert mask[0].sum() == 4096 - 1 and mask[0].view(torch.int32).sum() == 4095 * 0x3F800000
    with pytest.raises(ValueError, match=r"1 row\(s\) hold other values"):
        ebpo_advantage(rewards, mask, index, EBPOPrior())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_negative_zeros_in_a_long_float_mask_are_zeros(dtype):
    rewards, mask, index = _long_float_batch(dtype)
    ref, _ = ebpo_advantage(rewards, mask.to(torch.int64), index, EBPOPrior())
    mask[mask == 0] = -0.0  # every 0 of the mask, a whole padding row included
    assert torch.signbit(mask[5]).all()
    adv, diag = ebpo_advantage(rewards, mask, index, EBPOPrior())
    assert torch.equal(adv, ref) and diag["ebpo/padding_rows"] == 1.0
    assert torch.count_nonzero(adv[mask == 0]) == 0


_FLOAT_DTYPES = {torch.float32: 32, torch.float64: 64}


@st.composite
def _float_mask_case(draw):
    dtype = draw(st.sampled_from(list(_FLOAT_DTYPES)))
    rows, T = draw(st.integers(1, 7)), draw(st.integers(1, 40))
    bits = draw(st.lists(st.sampled_from([0.0, 1.0, -0.0]), min_size=rows * T, max_size=rows * T))
    bad = draw(
        st.none()
        | st.tuples(
            st.integers(0, rows * T - 1),
            st.floats(width=_FLOAT_DTYPES[dtype]).filter(lambda x: x not in (0.0, 1.0)),  # -0.0 == 0.0: kept out
        )
    )
    return dtype, rows, T, bits, bad


@settings(max_examples=200, deadline=None)
@given(_float_mask_case())
def test_property_a_float_mask_is_accepted_iff_it_holds_only_0_and_1(case):
    """Any float32/float64 mask of the rewards' dtype and any batch size (odd ones included): one value other
    than 0/1 (any float: NaN, infs, denormals, fractions, negatives) is refused; a mask of 0, -0 and 1 gives the
    int64 mask's advantages bit for bit."""
    dtype, rows, T, bits, bad = case
    mask = torch.tensor(bits, dtype=dtype).reshape(rows, T)
    rewards = (torch.arange(rows * T, dtype=dtype).reshape(rows, T) % 5) - 2
    index = np.array([f"g{i // 2}" for i in range(rows)], dtype=object)
    if bad is not None:
        mask.view(-1)[bad[0]] = bad[1]
        prior = EBPOPrior()
        with pytest.raises(ValueError, match=r"response_mask must hold only 0 and 1"):
            ebpo_advantage(rewards, mask, index, prior)
        assert prior.updates == 0
        return
    ref, ref_diag = ebpo_advantage(rewards, (mask != 0).to(torch.int64), index, EBPOPrior())
    adv, diag = ebpo_advantage(rewards, mask, index, EBPOPrior())
    assert torch.equal(adv, ref) and diag == ref_diag


@pytest.mark.parametrize("which", ["token_level_rewards", "response_mask"])
def test_numpy_inputs_are_named(which):
    rewards, mask = torch.ones(2, 2), torch.ones(2, 2, dtype=torch.int64)
    args = {"token_level_rewards": rewards, "response_mask": mask}
    args[which] = args[which].numpy()
    with pytest.raises(ValueError, match=rf"{which} must be a torch.Tensor .* got numpy.ndarray .*torch.as_tensor"):
        ebpo_advantage(args["token_level_rewards"], args["response_mask"], np.array(["a", "a"]), EBPOPrior())


# ------------------------------------------------------------------------------------------- group labels


@pytest.mark.parametrize(
    "index, words",
    [
        (np.array([None, "a", "a", None], dtype=object), ["2 None, 2 str", "row 0: None"]),
        (np.array(["a", float("nan"), "a", "b"], dtype=object), ["float", "row 1: nan"]),
        (np.array([1, 1.0, True, 2], dtype=object), ["2 int, 1 float, 1 bool"]),
        (np.array(["1", 1, "2", 2], dtype=object), ["2 str, 2 int"]),
        ([(1, 2), (1, 2), (3,), (3,)], ["4 tuple", "row 0: (1, 2)"]),
        ([(1, 2), (1, 2), (3, 4), (3, 4)], ["4 tuple"]),
        (np.array([[1, 2], [1, 2], [3, 4], [3, 4]]), ["shape (4, 2)", "tuples or lists"]),
        (torch.tensor([1.0, 1.0, 2.0, 2.0]), ["torch.float32 tensor"]),
        (np.array([True, True, False, False]), ["4 bool"]),
        ("aabb", ["got str"]),
        (7, ["got int"]),
    ],
    ids=["none", "nan", "int-float-bool", "str-int", "ragged-tuples", "tuples", "2d-array", "float-tensor", "bool",
         "string", "scalar"],
)
def test_labels_that_would_merge_or_split_groups_are_refused(index, words):
    rewards, mask = torch.tensor([[1.0], [0.0], [1.0], [1.0]]), torch.ones(4, 1, dtype=torch.int64)
    prior = EBPOPrior()
    with pytest.raises(ValueError, match="ebpo needs `index`") as e:
        ebpo_advantage(rewards, mask, index, prior)
    for w in words:
        assert w in str(e.value)
    assert prior.updates == 0


@pytest.mark.parametrize(
    "index",
    [
        ("a", "a", "b", "b"),
        ["a", "a", "b", "b"],
        np.array(["a", "a", "b", "b"]),
        np.array([10, 10, 20, 20]),
        torch.tensor([10, 10, 20, 20]),
        np.array([b"a", b"a", b"b", b"b"], dtype=object),
    ],
    ids=["tuple-of-str", "list", "unicode-array", "int-array", "int-tensor", "bytes"],
)
def test_accepted_label_forms_group_alike(index):
    rewards, mask = torch.tensor([[1.0], [0.0], [1.0], [1.0]]), torch.ones(4, 1, dtype=torch.int64)
    ref, _ = ebpo_advantage(rewards, mask, np.array(["a", "a", "b", "b"], dtype=object), EBPOPrior())
    adv, _ = ebpo_advantage(rewards, mask, index, EBPOPrior())
    assert torch.equal(adv, ref)


# ------------------------------------------------------------------------------------------- options, prior state


def test_epsilon_zero_is_refused_and_an_all_equal_batch_is_finite():
    with pytest.raises(ValueError, match=r"epsilon must be a finite number in \(0, 1\]"):
        EBPOOptions(epsilon=0.0)
    adv, diag = ebpo_advantage(torch.ones(4, 2), torch.ones(4, 2, dtype=torch.int64),
                               np.array(["a", "a", "b", "b"]), EBPOPrior(), EBPOOptions(epsilon=1e-12))
    assert torch.count_nonzero(adv) == 0 and diag["ebpo/shrinkage_min"] == 1.0


def test_a_non_finite_prior_is_never_saved(tmp_path):
    prior = EBPOPrior(Moments(2.0, 0.5, float("inf")), Moments(1.0, 0.5, 0.0), 1)
    assert not prior.is_finite()
    with pytest.raises(ValueError, match="refusing to save EBPO prior to .*p.json: it holds a non-finite value"):
        prior.save(tmp_path / "p.json")
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize(
    "patch, words",
    [
        ({"shaping": "garbage"}, "shaping must be null or an object"),
        ({"shaping": {"prior_decay": [1]}}, "shaping must be null or an object"),
        ({"reward": {"weight": "2", "mean": 0.5, "m2": 0.5}}, "reward.weight must be a number, got '2'"),
        ({"reward": {"weight": True, "mean": 0.5, "m2": 0.5}}, "reward.weight must be a number"),
        ({"reward": {"weight": 10**400, "mean": 0.5, "m2": 0.5}}, "reward.weight is out of range"),
        ({"reward": {"weight": 2.0, "mean": float("inf"), "m2": 0.5}}, "reward has invalid moments"),
        ({"reward": [1, 2, 3]}, "reward must be an object with weight, mean and m2"),
        ({"group_mean": None}, "group_mean must be an object"),
        ({"updates": 1.5}, "updates must be a non-negative integer"),
        ({"updates": -1}, "updates must be a non-negative integer"),
    ],
)
def test_malformed_prior_states_are_refused_and_leave_the_prior_alone(patch, words):
    good = EBPOPrior(Moments(2.0, 0.5, 0.5), Moments(1.0, 0.5, 0.0), 1, {"prior_scope": "running", "prior_decay": 1.0})
    target = EBPOPrior(Moments(3.0, 1.0, 0.0), Moments(1.0, 1.0, 0.0), 7)
    before = target.state_dict()
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace("[", r"\[")):
        target.load_state_dict({**good.state_dict(), **patch})
    assert target.state_dict() == before
