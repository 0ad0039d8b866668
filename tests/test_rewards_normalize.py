"""What math-verify is given for an answer (pure string code), the options' one declaration, and the one
`is_correct` shared by training, `label-difficulty` and the evaluation script."""

import contextlib
import dataclasses
import math
import os
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_ebpo.rewards.normalize import is_connector, verifier_input
from verl_ebpo.rewards.score import RewardOptions, is_correct, verdict_of
from test_rewards_extract import cpu_growth

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize(
    "text, expected",
    [
        ("42", "$42$"),
        ("$\\frac{1}{2}$", "$\\frac{1}{2}$"),
        ("\\(\\frac{1}{2}\\)", "$\\frac{1}{2}$"),
        ("The answer is $5$.", "$5$"),  # prose without digits around the math is dropped
        ("The final answer is 5", "$5$"),
        ("$x=1$ or $x=2$", "$x=1  or  x=2$"),  # math-verify reads this as the set {x=1, x=2}
        ("$4$, or possibly $3$", "$4 , or possibly  3$"),  # joined by other words: all of it
        ("5 (since $2+3=5$)", "$5 (since  2+3=5 )$"),  # digits outside the math: all of it
        ("42. I hope it is correct.", "$42$"),
        ("4. Or maybe 5.", "$4. Or maybe 5$"),
        ("**42**", "$42$"),
        ("$42", "$42$"),  # the literal `$Answer` of the DAPO prompt
        ("4.", "$4$"),
        ("1\\,234", "$1234$"),
        ("12\\,345\\,678.5", "$12345678.5$"),
        ("1 000 000", "$1000000$"),
        ("2 5", "$2 5$"),  # not groups of three digits
        ("\\frac{1}{2} 345", "$\\frac{1}{2} 345$"),
        ("20\\%", "$20$\\%"),
        ("20 percent", "$20$\\%"),
        ("5 \\text{ cm}^2", "$5$"),  # a unit
        ("125\\textnormal{ miles}", "$125$"),
        ("10 \\text{ m}/\\text{s}", "$10$"),
        ("4 \\text{ (or possibly 3)}", "$4  (or possibly 3)$"),  # not a unit: it stays part of the answer
        ("4 \\text{ if } n \\text{ even}, 3 \\text{ otherwise}", "$4  if  n  even, 3  otherwise$"),
        ("4 \\text{ or more}", "$4  or more$"),
        ("\\text{(C)}", "$\\text{(C)}$"),
        ("2\\frac{1}{4}", "$(2+\\frac{1}{4})$"),  # a mixed number
        ("4 4/9", "$(4+\\frac{4}{9})$"),
        ("2\\frac{5}{4}", "$2\\frac{5}{4}$"),  # not a proper fraction: a product
        ("x^2\\frac{1}{2}", "$x^2\\frac{1}{2}$"),
        ("74°", "$74^\\circ$"),
        ("−3 × 2", "$-3 \\times  2$"),
        ("\\boxed{\\boxed{3}}", "$\\boxed{\\boxed{3}}$"),  # math-verify unwraps boxes itself
        ("\\varnothing", "$\\emptyset$"),
        ("5 \\\\", "$5$"),
        ("", "$$"),
    ],
)
def test_verifier_input(text, expected):
    assert verifier_input(text) == expected


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=300))
def test_verifier_input_is_total_and_one_formula(text):
    out = verifier_input(text)
    assert out.startswith("$")
    assert out.endswith("$") or out.endswith("$\\%")
    assert re.search(r"(?<!\\)\$", out[1:].rsplit("$", 1)[0]) is None  # no unescaped `$` inside


_UNITS = ["$", "\\text{", "1 ", "\\boxed{", "a. B", "{a. B", "$a$ ", " ", "\\, ", "\\text{a} ", "\\", "2\\frac{1}{3}",
          "1/2 ", "\\(", "\\[", "\\(x", "$$x", "\\,", "\\quad.", "x$ ", "1\\,000", "\\%", "**", "or "]


@pytest.mark.parametrize("unit", _UNITS)
def test_ground_truth_reading_work_grows_linearly(unit):
    """A ground truth is read in verl's reward thread, outside the verifier's time bound, so its reading must be
    linear like an answer's: 20,000 unclosed `\\(` once took 4 CPU s, x4 per doubling. 4 times the text costs
    at most ~9 times the CPU (linear: 4; quadratic: 16). Each unit alone, and after a number and before `}`."""
    def read(text):
        verifier_input.cache_clear()  # the work, not a cache hit
        with contextlib.suppress(ValueError):
            verdict_of(None, text)  # no answer: only the ground truth is read

    for make in (lambda n: unit * n, lambda n: "5 " + unit * n + "}"):
        assert cpu_growth(read, make, 5_000) < 9, unit


@pytest.mark.parametrize(
    "gap, joins",
    [(" and ", True), (", ", True), ("$ or $x = ", True), (" \\quad \\text{and} \\quad ", True), ("\n\\]\n\\[", True),
     (" then ", False), (". ", False), (" for part (a) and ", False), (", no wait: ", False), ("x" * 300, False)],
)
def test_list_connectors(gap, joins):
    assert is_connector(gap) is joins


# --- is_correct: one definition ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "result, expected",
    [
        ({"score": 1.0, "acc": True}, True),
        ({"score": -1.0, "acc": False}, False),
        ({"score": 1.0, "acc": None}, True),  # no verdict: the score decides
        ({"score": 0.0}, False),
        ({"score": 0.5}, True),
        ({"score": -1}, False),
        (1, True),
        (0.0, False),
        (True, True),
        (False, False),
    ],
)
def test_is_correct(result, expected):
    assert is_correct(result) is expected


@pytest.mark.parametrize("result", [None, {}, {"acc": None}, {"score": "high"}, "yes", {"score": float("nan")}])
def test_is_correct_refuses_results_without_a_verdict(result):
    with pytest.raises(ValueError, match="scorer result"):
        is_correct(result)


def test_labelling_and_evaluation_use_the_training_verdict():
    import importlib.util
    import sys

    from verl_ebpo.tools.labeling import difficulty as labeling

    assert not hasattr(labeling, "is_correct")  # no second definition
    source = open(labeling.__file__).read()
    assert "from verl_ebpo.rewards.score import is_correct" in source
    sys.path.insert(0, os.path.join(ROOT, "recipes", "eval"))
    try:
        spec = importlib.util.spec_from_file_location("eval_score", os.path.join(ROOT, "recipes", "eval", "score.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.pop(0)
    assert module.is_correct is is_correct


def test_label_difficulty_counts_a_result_without_a_verdict_as_a_scorer_error(tmp_path):
    import json

    import pyarrow as pa

    from verl_ebpo.tools.labeling import label_difficulty

    table = pa.table({"data_source": ["m", "m"], "reward_model": [{"ground_truth": "1"}, {"ground_truth": "2"}]})
    rollouts = tmp_path / "r.jsonl"
    rollouts.write_text("\n".join(json.dumps({"index": i, "response": r}) for i, r in [(0, "a"), (0, "b"), (1, "c")]))

    def scorer(data_source, solution_str, ground_truth, extra_info=None):
        return {"score": 1.0} if solution_str == "a" else {"acc": None}

    from verl_ebpo.tools.labeling import LabelingError

    with pytest.raises(LabelingError, match=r"2 of 3 answers made the scorer raise .*needs 'acc' or a numeric 'score'"):
        label_difficulty(table, str(rollouts), scorer=scorer, progress=False)  # strict by default
    out, stats = label_difficulty(table, str(rollouts), scorer=scorer, progress=False, max_scorer_errors=2)
    assert stats["scorer_errors"] == 2
    assert out.column("extra_info").to_pylist()[0]["difficulty"] == 0.5


# --- options: one declaration ------------------------------------------


def test_docs_name_every_option():
    doc = open(os.path.join(ROOT, "docs", "reward.md")).read()
    assert all(f"`{f.name}`" in doc for f in dataclasses.fields(RewardOptions))


def test_options_validate_and_name_the_key():
    assert RewardOptions(timeout="2", processes=3.0, no_answer_score="-1").timeout == 2.0
    assert RewardOptions().no_answer_score is None
    for bad, key in [({"timeout": 0}, "timeout"), ({"wrong_score": math.nan}, "wrong_score"),
                     ({"processes": 1.5}, "processes"), ({"no_answer_score": "x"}, "no_answer_score"),
                     ({"kill_grace": 0}, "kill_grace"), ({"correct_score": True}, "correct_score")]:
        with pytest.raises(ValueError, match=f"reward_kwargs.{key}"):
            RewardOptions(**bad)
