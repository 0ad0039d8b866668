"""The topic study (`verl-ebpo simulate --study topics`): the topic-ordered gradient measurement, EBPO's
blow-up count and the command's refusals. (Its committed results are checked in tests/test_docs_numbers.py.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from verl_ebpo.tools import cli
from verl_ebpo.tools.simulate import topics
from verl_ebpo.tools.simulate.estimators import parse_estimator, process_prior_preserved

F64 = torch.float64


def _all_fail_after_a_prior(call):
    """Advantages of an all-fail batch (256 rows, G=8) after one mixed batch gave the prior a mean of 0.3."""
    seed = torch.zeros(32, dtype=torch.long)
    mixed = torch.from_numpy((np.arange(256) % 10 < 3).astype(np.float64).reshape(32, 8))
    call(mixed, seed)
    return call(torch.zeros(32, 8, dtype=F64), seed)


def test_verls_ebpo_gives_an_all_fail_batch_zero_advantages_and_the_study_counts_blowups():
    with process_prior_preserved():
        caller = topics.CountingCaller(parse_estimator("ebpo"), 1)
        adv = _all_fail_after_a_prior(lambda y, seed: caller(y, seed, 8))
    assert adv.abs().max() < 1.0 and caller.blowups.tolist() == [0.0]
    counting = topics.CountingCaller(parse_estimator("ebpo"), 2)
    counting.inner = lambda scores, group_seed, G: torch.tensor([0.0, 0.0, 5.0, 0.0], dtype=F64)  # seed 1 blows up
    counting(torch.zeros(2, 2, dtype=F64), torch.tensor([0, 1]), 2)
    assert counting.blowups.tolist() == [0.0, 1.0]


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
