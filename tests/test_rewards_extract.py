"""Answer extraction and ground-truth reading: pure string code, known cases and properties."""

import time
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_ebpo.rewards.extract import extract_answer, ground_truth_texts, last_answer_line, last_boxed


@pytest.mark.parametrize(
    "text, expected",
    [
        (r"so $\boxed{\frac{1}{2}}$.", ("boxed", r"\frac{1}{2}")),
        (r"\boxed{1} then \fbox{2}", ("boxed", "2")),
        (r"\fbox{3} then \boxed{4}", ("boxed", "4")),
        (r"\boxed{\{1,2\}}", ("boxed", r"\{1,2\}")),  # escaped braces do not count
        (r"\boxed{\left\{ x \right.}", ("boxed", r"\left\{ x \right.")),
        (r"\boxed{1 \\ 2}", ("boxed", r"1 \\ 2")),  # a LaTeX line break is not an escaped brace
        (r"\boxed {x}", ("boxed", "x")),
        (r"\boxed{\boxed{3}}", ("boxed", "3")),
        (r"\boxed{ 7 }", ("boxed", "7")),
        (r"\boxed{1} and \boxed{2", None),  # the last box never closes: no boxed answer
        ("\\boxed{1} and \\boxed{2\nAnswer: 9", ("answer_line", "9")),
        ("Answer: 5\nmore text", ("answer_line", "5")),
        ("ANSWER : $x=3$  \n", ("answer_line", "$x=3$")),
        ("Final answer: 12", ("answer_line", "12")),
        ("Answer:\n\n 7 \n", ("answer_line", "7")),
        ("Answer: 3\nAnswer:   \n", ("answer_line", "3")),
        ("Answer: 4\n\\boxed{5}", ("boxed", "5")),  # the box comes after the Answer: line
        ("\\boxed{5}\nAnswer: 4", ("answer_line", "4")),  # the Answer: line comes after the box
        ("\\boxed{5}. Final Answer: 4", ("answer_line", "4")),  # ... starting a sentence
        ("\\boxed{5}\n**Answer**: 4", ("answer_line", "4")),
        ("\\boxed{5} Answer: 4", ("boxed", "5")),  # not a line or sentence start
        ("\\boxed{5}\nTo check the answer: put 4 in", ("boxed", "5")),  # prose, not a final-answer marker
        ("Answer:\n\\[\n9\n\\]", ("answer_line", "\\[\n9\n\\]")),  # display math over lines
        ("**Answer:**\n$$\n9\n$$", ("answer_line", "$$\n9\n$$")),
        (r"\beginboxed{8}", ("boxed", "8")),  # a box that lost its backslash
        # several final boxes joined by list words are one answer; other words end the list
        (r"the solutions are \boxed{(2,2)} and \boxed{(6,2)}.", ("boxes", "(2,2), (6,2)")),
        (r"$$\boxed{1} \quad \text{and} \quad \boxed{2}$$", ("boxes", "1, 2")),
        (r"\boxed{1},\boxed{2}; \boxed{3} or \boxed{4}", ("boxes", "1, 2, 3, 4")),
        (r"So $x = \boxed{3}$ or $x = \boxed{4}$.", ("boxes", "3, 4")),
        (r"\boxed{1} then \boxed{2}", ("boxed", "2")),
        (r"\boxed{1}. \boxed{2}", ("boxed", "2")),  # a full stop ends the list
        (r"\boxed{5} and \boxed{5}", ("boxed", "5")),  # a repeat is one answer
        (r"\boxed{1} and \boxed{\boxed{2}}", ("boxes", "1, 2")),
        (r"\boxed{} Answer: 6", ("answer_line", "6")),  # an empty box is no answer
        ("the answer is 5", None),
        ("", None),
        (None, None),
        (b"\\boxed{8}", ("boxed", "8")),
        ("\x00\\boxed{4\x00}", ("boxed", "4")),
        ("\ud800\\boxed{4}", ("boxed", "4")),
    ],
)
def test_extraction_cases(text, expected):
    got = extract_answer(text)
    assert (None if got is None else tuple(got)) == expected


@pytest.mark.parametrize(
    "text",
    [
        "{" * 120_000,
        "\\boxed{" + "{" * 120_000,
        "\\boxed{" * 20_000,
        "\\boxed" + " " * 120_000,
        "Answer" + " " * 120_000,
        "Answer:" + " " * 120_000,
        "answer:" * 17_000,
        "\\" * 120_000,
        "Answer: " + "x" * 120_000,
        "\\boxed{1}, " * 20_000,  # a list of 20k boxes (walked back once)
        ", ".join(f"\\boxed{{{i}}}" for i in range(20_000)),
        "\\boxed{} " * 20_000,
        "boxed{1} " * 20_000,
        "a:" * 60_000,  # many colons, none after "answer"
    ],
)
def test_extraction_is_fast_on_adversarial_text(text):
    t = time.perf_counter()
    extract_answer(text)
    assert time.perf_counter() - t < 1.0  # linear time; a quadratic scan would take minutes


balanced = st.recursive(
    st.text(alphabet="0123456789abx+-*/^_().,= ", max_size=8),
    lambda inner: st.builds(lambda a, b: a + "{" + b + "}", inner, inner) | st.builds(lambda a, b: a + b, inner, inner),
    max_leaves=20,
)
noise = st.text(alphabet=st.characters(blacklist_characters="\\{}"), max_size=200)


@settings(max_examples=200, deadline=None)
@given(before=noise, content=balanced, after=noise)
def test_last_box_content_round_trips(before, content, after):
    text = before + "\\boxed{" + content + "}" + after
    assert last_boxed(text) == content
    got = extract_answer(text)
    if content.strip():
        assert tuple(got) == ("boxed", content.strip())


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_extraction_never_raises_and_returns_part_of_the_text(text):
    got = extract_answer(text)
    if got is not None:
        assert got.kind in ("boxed", "boxes", "answer_line")
        assert got.text and got.text == got.text.strip()
        clean = text.replace("\x00", "")
        clean_utf8 = clean.encode("utf-8", "replace").decode("utf-8")
        parts = got.text.split(", ") if got.kind == "boxes" else [got.text]  # several boxes: each is in the text
        assert all(p in clean or p in clean_utf8 for p in parts)


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=-(10**12), max_value=10**12), noise)
def test_answer_line_takes_the_last_one(n, filler):
    text = f"Answer: {n + 1}\n{filler}\nAnswer: {n}\n"
    assert last_answer_line(text) == str(n)


@pytest.mark.parametrize(
    "gt, expected",
    [
        ("5", ["5"]),
        ("  \\frac{1}{2} ", ["\\frac{1}{2}"]),
        ("\\boxed{\\frac{1}{2}}", ["\\frac{1}{2}"]),
        ("The answer is $\\boxed{7}$.", ["7"]),
        (12, ["12"]),
        (np.int64(12), ["12"]),
        (0.25, ["0.25"]),
        (1e-7, ["0.0000001"]),
        (np.float32(0.5), ["0.5"]),
        (Fraction(3, 4), ["3/4"]),
        (["3", 4], ["3", "4"]),
        (("a",), ["a"]),
        (np.array(["3", "4"], dtype=object), ["3", "4"]),
        (np.array("7"), ["7"]),
        (b"9", ["9"]),
    ],
)
def test_ground_truth_forms(gt, expected):
    assert ground_truth_texts(gt) == expected


@pytest.mark.parametrize("gt", [None, "", "   ", [], True, float("nan"), float("inf"), {"a": 1}, ["1", None]])
def test_unusable_ground_truth_is_a_clear_error(gt):
    with pytest.raises(ValueError, match="ground_truth"):
        ground_truth_texts(gt)
