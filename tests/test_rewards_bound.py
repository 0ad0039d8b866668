"""A reward call's time bound covers the whole call (extraction included), and a ground truth with nothing in it once
normalised is refused.

Extraction and normalisation run inside the verifier process, under the job's `timeout + kill_grace`. Before, they
ran in the caller's thread, outside any bound: 10,000 `\\boxed{1}, ` took 2.1 s with timeout=1, kill_grace=1 and
4-16 s on a loaded machine; a few MB of boxes or colons took several seconds."""

import pytest

from verl_ebpo.rewards import compute_score

TIMEOUT, GRACE = 0.5, 0.5


def _warm():
    """A free, started verifier (the wait for one is not part of the call's bound, see docs/reward.md)."""
    assert compute_score("x", "\\boxed{4}", "4", timeout=30, kill_grace=5, processes=1)["acc"]


@pytest.mark.parametrize("name, output", [
    ("4 MB of boxes in a list", "\\boxed{1}, " * 360_000 + "\\boxed{4}"),
    ("3.5 MB of unclosed boxes", "\\boxed{" * 500_000),
    ("4 MB of nested boxes", "\\boxed{" * 250_000 + "4" + "}" * 250_000),
    ("8 MB of colons", ":" * 8_000_000),
    ("an Answer: line of 4 MB of dollars", "Answer: " + "$" * 4_000_000),
], ids=["boxes", "unclosed", "nested", "colons", "dollars"])  # short ids: pytest puts the id in the environment
def test_a_call_returns_within_its_bound_whatever_the_output(name, output):
    """The whole output goes to the verifier, whose timer or kill bounds the call (the pool's tests hold the
    kill): whatever it is, a verdict comes back, never an exception."""
    _warm()
    out = compute_score("x", output, "4", timeout=TIMEOUT, kill_grace=GRACE, processes=1)
    assert out["acc"] is False or name == "4 MB of nested boxes"
    assert out["verdict"] in ("wrong", "no_answer", "timeout", "correct"), out


def test_the_issues_outputs_are_graded_within_the_bound():
    _warm()
    for output, verdict in [("\\boxed{1}, " * 10_000 + "\\boxed{4}", "wrong"),  # the list `1, 4`
                            (":" * 1_000_000, "no_answer")]:
        out = compute_score("x", output, "4", timeout=5.0, kill_grace=1.0, processes=1)
        assert out["verdict"] in (verdict, "timeout")  # graded, or a timeout on a very loaded machine


@pytest.mark.parametrize("gold", ["$$", "$ $", "\\,", "\\quad", ".", ",", "Answer:", "\\fbox{", "\\boxed{}",
                                  ["5", "$ $"]])
def test_a_ground_truth_empty_after_normalisation_is_a_value_error(gold):
    """Before: graded, and `Answer: .` or `Answer: $ $` scored 1 against it (a reward hack)."""
    with pytest.raises(ValueError, match=r"^ground_truth is empty after normalisation: ") as info:
        compute_score("x", "Answer: .", gold, processes=1)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("output", ["Answer: .", "Answer: $ $", "Answer: \\,", "\\boxed{\\quad}", "Answer: **.**", "", None,
                                    b"", "\x00"])
def test_an_answer_empty_after_normalisation_is_no_answer(output):
    out = compute_score("x", output, "5", processes=1)
    assert out["verdict"] == "no_answer" and out["acc"] is False and out["score"] == 0.0
    assert compute_score("x", output, "5", processes=1, no_answer_score=-1)["score"] == -1.0
