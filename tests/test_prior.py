"""The EBPO prior (`advantage.prior`): its state round-trips exactly, a state that is not a finite prior of this
schema is refused and leaves the prior alone, a non-finite prior is never saved."""

from __future__ import annotations

import pytest

from verl_ebpo.advantage.prior import EBPOPrior, Moments, read_prior_file

GOOD = EBPOPrior(Moments(2.0, 0.5, 0.5), Moments(1.0, 0.5, 0.0), 1)


def test_state_and_file_round_trip_exactly(tmp_path):
    prior = EBPOPrior(Moments(3.0, 1 / 3, 2 / 3), Moments(1.5, 1 / 3, 1 / 3), 2)
    copy = EBPOPrior()
    copy.load_state_dict(prior.state_dict())
    assert copy == prior
    prior.save(tmp_path / "p.json", global_step=4)
    assert read_prior_file(tmp_path / "p.json") == (prior, 4)


def test_a_non_finite_prior_is_never_saved(tmp_path):
    prior = EBPOPrior(Moments(2.0, 0.5, float("inf")), Moments(1.0, 0.5, 0.0), 1)
    with pytest.raises(ValueError, match="refusing to save EBPO prior to .*p.json: it holds a non-finite value"):
        prior.save(tmp_path / "p.json")
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize(
    "patch",
    [
        {"schema": "other"},
        {"version": 2},
        {"reward": {"weight": 2.0, "mean": 0.5}},
        {"reward": {"weight": "two", "mean": 0.5, "m2": 0.5}},
        {"reward": {"weight": 2.0, "mean": float("inf"), "m2": 0.5}},
        {"reward": {"weight": -1.0, "mean": 0.5, "m2": 0.5}},
        {"group_mean": {"weight": 1.0, "mean": 0.5, "m2": -0.1}},
        {"reward": [1, 2, 3]},
        {"group_mean": None},
        {"updates": -1},
        {"updates": None},
    ],
)
def test_a_state_that_is_not_a_finite_prior_is_refused_and_leaves_the_prior_alone(patch):
    target = EBPOPrior(Moments(3.0, 1.0, 0.0), Moments(1.0, 1.0, 0.0), 7)
    before = target.state_dict()
    with pytest.raises(ValueError):
        target.load_state_dict({**GOOD.state_dict(), **patch})
    assert target.state_dict() == before
