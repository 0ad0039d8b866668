"""The topic study (`verl-ebpo simulate --study topics`): the per-topic prior's math, the topic-ordered gradient
measurement and the command's refusals. (Its committed results are checked in tests/test_docs_numbers.py.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from verl_ebpo.advantage.core import normalize_advantage
from verl_ebpo.tools import cli
from verl_ebpo.tools.simulate import topic_prior, topics
from verl_ebpo.tools.simulate.estimators import AdvantageCaller, parse_estimator, process_prior_preserved

F64 = torch.float64


def test_per_topic_prior_known_answer_by_hand():
    """One seed, two topics, G=2: topic 0 groups [1,1], [1,0]; topic 1 groups [0,0], [0,1].
    Rewards: mu = 0.5, sigma2 = 0.25; group means: tau2 = 0.125, within-topic tau2_w = 0.0625, between-topic
    omega2 = 0.0625; each topic has 2 groups, so lam = (0.0625/2) / (0.0625/2 + 0.0625) = 1/3.
    Topic 0: mu_0 = 0.75 -> 2/3 * 0.75 + 1/3 * 0.5 = 2/3; sigma2_0 = 0.1875 -> 0.125 + 0.25/3 = 5/24;
    tau2_0 = 0.0625 -> 0.0625 * 2/3 + 0.125/3 = 1/12; S = (5/48) / (5/48 + 1/12) = 5/9. Topic 1 by symmetry:
    mu = 1/3, S = 5/9."""
    scores = torch.tensor([[1.0, 1.0], [1.0, 0.0], [0.0, 0.0], [0.0, 1.0]], dtype=F64)
    seed = torch.zeros(4, dtype=torch.long)
    topic = torch.tensor([0, 0, 1, 1])
    adv, state, mu, s = topic_prior.topic_prior_advantage(scores, seed, topic, topic_prior.TopicMoments.empty(2), 1)
    mu_k, s2_k, t2_k, lam = topic_prior.topic_prior(state, 1)
    assert torch.allclose(lam, torch.tensor([1 / 3, 1 / 3], dtype=F64), atol=1e-15)
    assert torch.allclose(mu_k, torch.tensor([2 / 3, 1 / 3], dtype=F64), atol=1e-15)
    assert torch.allclose(s2_k, torch.tensor([5 / 24, 5 / 24], dtype=F64), atol=1e-15)
    assert torch.allclose(t2_k, torch.tensor([1 / 12, 1 / 12], dtype=F64), atol=1e-15)
    assert torch.allclose(s, torch.full((4,), 5 / 9, dtype=F64), atol=1e-15)
    assert torch.allclose(mu, torch.tensor([2 / 3, 2 / 3, 1 / 3, 1 / 3], dtype=F64), atol=1e-15)
    v = (1 - s) * scores.mean(1) + s * mu
    raw = (scores - v[:, None]).reshape(-1)
    expected = normalize_advantage(raw, torch.ones(8, dtype=torch.bool), "batch", 1e-6)
    assert torch.allclose(adv, expected, atol=1e-14)


@pytest.mark.parametrize("decay", [1.0, 0.6, 0.0])
def test_one_topic_is_verls_ebpo(decay):
    """With one topic the per-topic prior is EBPO's prior: the advantages equal verl's registered `ebpo` called per
    seed (its own running prior per seed), batch after batch, running, decayed, and (decay 0) prior_scope=batch."""
    S, G, n = 3, 4, 6
    rng = np.random.default_rng(7)
    label = {1.0: "ebpo", 0.0: "ebpo_batch"}.get(decay, f"ebpo:prior_decay={decay:g}")
    with process_prior_preserved():
        ref = AdvantageCaller(parse_estimator(label), S)
        mine = topic_prior.TopicPriorCaller(S, 1, decay=decay)
        for _ in range(5):
            y = torch.from_numpy((rng.random((S * n, G)) < rng.random((S * n, 1))).astype(np.float64))
            seed = torch.arange(S).repeat_interleave(n)
            a = ref(y, seed, G)
            b = mine(y, seed, G, topic=torch.zeros(S * n, dtype=torch.long))
            assert torch.allclose(a, b, rtol=1e-10, atol=1e-12)
            assert torch.allclose(topic_prior.prior_mean_of(mine, seed), topic_prior.prior_mean_of(ref, seed), atol=1e-14)


def test_normalize_per_seed_is_ebpos_normalisation_per_seed():
    rng = np.random.default_rng(3)
    raw = torch.from_numpy(rng.normal(size=30))
    seed = torch.from_numpy(np.sort(rng.integers(0, 4, size=30)))
    raw[seed == 2] = 0.25  # a seed whose raw advantages are all equal: 0
    got = topic_prior.normalize_per_seed(raw, seed, 4, 1e-6)
    for k in range(4):
        rows = seed == k
        want = normalize_advantage(raw[rows], torch.ones(int(rows.sum()), dtype=torch.bool), "batch", 1e-6)
        assert torch.allclose(got[rows], want, atol=1e-13)


def _all_fail_after_a_prior(call):
    """Advantages of an all-fail batch (256 rows, G=8) after one mixed batch gave the prior a mean of 0.3."""
    seed = torch.zeros(32, dtype=torch.long)
    mixed = torch.from_numpy((np.arange(256) % 10 < 3).astype(np.float64).reshape(32, 8))
    call(mixed, seed)
    return call(torch.zeros(32, 8, dtype=F64), seed)


def test_all_fail_batch_gets_zero_advantages():
    """raw = -S mu on every row: the per-topic prior's normalisation gives 0 (no signal), not rounding noise."""
    caller = topic_prior.TopicPriorCaller(1, 1)
    adv = _all_fail_after_a_prior(lambda y, seed: caller(y, seed, 8, topic=torch.zeros_like(seed)))
    assert torch.equal(adv, torch.zeros(256, dtype=F64))


def test_verls_ebpo_gives_an_all_fail_batch_zero_advantages():
    with process_prior_preserved():
        caller = AdvantageCaller(parse_estimator("ebpo"), 1)
        adv = _all_fail_after_a_prior(lambda y, seed: caller(y, seed, 8))
    assert adv.abs().max() < 1.0


def test_decay_forgets_old_topics():
    """A decayed per-topic prior forgets: after many batches of topic 1 only, topic 0's cell has decayed weight."""
    state = topic_prior.TopicMoments.empty(2)
    ones, zeros = torch.ones(4, 2, dtype=F64), torch.zeros(4, 2, dtype=F64)
    seed = torch.zeros(4, dtype=torch.long)
    state = topic_prior.merge_topic_moments(state, ones, seed, 1, 0.5)  # topic 0
    for _ in range(3):
        state = topic_prior.merge_topic_moments(state, zeros, seed + 1, 1, 0.5)  # topic 1
    assert state.w.tolist() == [8 * 0.5 ** 3, 8 * (1 + 0.5 + 0.25)]
    assert state.mean.tolist() == [1.0, 0.0]


def _options(**kw):
    given = {"prompts": "64", "answers_per_step": "64", "seeds": "2", "G": "4", "grad_draws": "8",
             "grad_warmup": "2", "features": "4", **kw}
    return topics.study_options(given)


def test_topic_order_batches_hold_one_topic_and_batch_prior_follows_it():
    """Under topic order each batch (B = 16 prompts, 16 per topic) is one topic, so the batch-scope prior's mean is
    the topic's and its error is below its error on shuffled batches; EBPO's running prior (decay 1) does not
    follow the topic."""
    from verl_ebpo.tools.simulate.engine import build_task
    from verl_ebpo.tools.simulate.gradient import measure
    from verl_ebpo.tools.simulate.task import stream

    o = _options(concentration="200")
    task = build_task(o)
    s = stream(task, "topic", 64, o.seed_list)
    t = torch.gather(task.topic, 1, s).reshape(2, 4, 16)
    assert bool((t == t[..., :1]).all())
    err = {}
    for order in topics.ORDERS:
        for label in ("ebpo_batch", "ebpo"):
            r = measure(task, parse_estimator(label), 4, o, o.seed_list, 8, 2, order=order, prior_error=True)
            err[order, label] = r.prior_err
    assert (err["topic", "ebpo_batch"] < 0.5 * err["random", "ebpo_batch"]).all()
    assert (err["topic", "ebpo"] > 0.5 * err["random", "ebpo"]).all()
    drg = measure(task, parse_estimator("drgrpo"), 4, o, o.seed_list, 8, 2, order="topic", prior_error=True)
    assert drg.prior_err is None


def test_measure_refuses_topic_order_for_dapo_and_unknown_order():
    from verl_ebpo.tools.simulate.engine import build_task
    from verl_ebpo.tools.simulate.gradient import measure

    o = _options()
    task = build_task(o)
    with pytest.raises(ValueError, match="dynamic sampling"):
        measure(task, parse_estimator("dapo"), 4, o, o.seed_list, 2, 0, order="topic")
    with pytest.raises(ValueError, match="order must be"):
        measure(task, parse_estimator("ebpo"), 4, o, o.seed_list, 2, 0, order="sorted")


@pytest.mark.parametrize("flags, message", [
    (["--estimators", "grpo"], "--estimators is set by --study topics"),
    (["--order", "topic"], "--order is set by --study topics"),
    (["--topics", "0"], "topics"),
    (["--grad-draws", "1"], "grad_draws=1"),
])
def test_study_refusals_are_one_line(tmp_path, capsys, flags, message):
    assert cli.main(["simulate", "--study", "topics", *flags, "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_study_refuses_an_out_that_is_a_file(tmp_path, capsys):
    f = tmp_path / "f"
    f.write_text("x")
    assert cli.main(["simulate", "--study", "topics", "--out", str(f), "--quiet"]) == 2
    assert "not a folder" in capsys.readouterr().err
    assert f.read_text() == "x"
