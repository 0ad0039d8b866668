"""Answer extraction and ground-truth reading: pure string code, known cases and properties."""

import sys
import time
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_ebpo.rewards.extract import scan_boxes
from verl_ebpo.rewards.extract import extract_answer, final_boxes, ground_truth_texts


@pytest.mark.parametrize(
    "text, expected",
    [
        (r"so $\boxed{\frac{1}{2}}$.", r"\frac{1}{2}"),
        (r"\boxed{1} then \fbox{2}", "2"),
        (r"\fbox{3} then \boxed{4}", "4"),
        (r"\boxed{\{1,2\}}", r"\{1,2\}"),  # escaped braces do not count
        (r"\boxed{\left\{ x \right.}", r"\left\{ x \right."),
        (r"\boxed{1 \\ 2}", r"1 \\ 2"),  # a LaTeX line break is not an escaped brace
        (r"\boxed {x}", "x"),
        (r"\boxed{\boxed{3}}", "3"),
        (r"\boxed{ 7 }", "7"),
        (r"\boxed{1} and \boxed{2", None),  # the last box never closes: no boxed answer
        ("\\boxed{1} and \\boxed{2\nAnswer: 9", "9"),
        ("Answer: 5\nmore text", "5"),
        ("ANSWER : $x=3$  \n", "$x=3$"),
        ("Final answer: 12", "12"),
        ("Answer:\n\n 7 \n", "7"),
        ("Answer: 3\nAnswer:   \n", "3"),
        ("Answer: 4\n\\boxed{5}", "5"),  # the box comes after the Answer: line
        ("\\boxed{5}\nAnswer: 4", "4"),  # the Answer: line comes after the box
        ("\\boxed{5}. Final Answer: 4", "4"),  # ... starting a sentence
        ("\\boxed{5}\n**Answer**: 4", "4"),
        ("\\boxed{5} Answer: 4", "5"),  # not a line or sentence start
        ("\\boxed{5}\nTo check the answer: put 4 in", "5"),  # prose, not a final-answer marker
        ("Answer:\n\\[\n9\n\\]", "\\[\n9\n\\]"),  # display math over lines
        ("**Answer:**\n$$\n9\n$$", "$$\n9\n$$"),
        (r"\beginboxed{8}", "8"),  # a box that lost its backslash
        # several final boxes joined by list words are one answer; other words end the list
        (r"the solutions are \boxed{(2,2)} and \boxed{(6,2)}.", "(2,2), (6,2)"),
        (r"$$\boxed{1} \quad \text{and} \quad \boxed{2}$$", "1, 2"),
        (r"\boxed{1},\boxed{2}; \boxed{3} or \boxed{4}", "1, 2, 3, 4"),
        (r"So $x = \boxed{3}$ or $x = \boxed{4}$.", "3, 4"),
        (r"\boxed{1} then \boxed{2}", "2"),
        (r"\boxed{1}. \boxed{2}", "2"),  # a full stop ends the list
        (r"\boxed{5} and \boxed{5}", "5"),  # a repeat is one answer
        (r"\boxed{1} and \boxed{\boxed{2}}", "1, 2"),
        (r"\boxed{} Answer: 6", "6"),  # an empty box is no answer
        ("the answer is 5", None),
        ("", None),
        (None, None),
        (b"\\boxed{8}", "8"),
        ("\x00\\boxed{4\x00}", "4"),
        ("\ud800\\boxed{4}", "4"),
    ],
)
def test_extraction_cases(text, expected):
    assert extract_answer(text) == expected


def cpu_growth(fn, make, n):
    """CPU time of `fn(make(4 * n))` over that of `fn(make(n))` (best of 3 each, measured side by side): ~4 for
    linear work, ~16 for quadratic, whatever the load of the machine."""
    def best(text):
        times = []
        for _ in range(3):
            t = time.process_time()
            fn(text)
            times.append(time.process_time() - t)
        return max(min(times), 1e-4)

    small, big = make(n), make(4 * n)
    return best(big) / best(small)


@pytest.mark.parametrize(
    "unit",
    ["{", "\\boxed{", "\\boxed{{", "\\boxed ", "Answer ", "Answer: ", "answer:", "\\", "x", "\\boxed{1}, ",
     "\\boxed{} ", "boxed{1} ", "a:", "\\(", "\\[", "$$x", "{. A", "\\,"],
)
def test_extraction_work_grows_linearly_on_adversarial_text(unit):
    """4 times the text costs at most ~9 times the CPU (linear: 4; a rescan per opener: 16)."""
    assert cpu_growth(extract_answer, lambda n: "Answer: 1" + unit * n, 5_000) < 9
    assert cpu_growth(extract_answer, lambda n: unit * n, 5_000) < 9


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
    end = len(before) + len("\\boxed{") + len(content)  # the box's own closing brace, not an inner one
    assert final_boxes(text) == (end, [content.strip()] if content.strip() else [])
    if content.strip():
        assert extract_answer(text) == content.strip()


def _reference_boxes(s):
    """Each box read on its own, the slow and obvious way: every `boxed`/`fbox` + spacing + `{`, and the
    first `}` after it that brings its depth back to zero, counting from its `{` (an escaped character does
    not count). Quadratic; for checking `scan_boxes` on short texts."""
    import re

    out = []
    for m in re.finditer(r"(?=((?:boxed|fbox)\s*\{))", s):
        name, brace = m.start(), m.start() + len(m.group(1)) - 1
        depth, k, end = 0, brace, None
        while k < len(s):
            if s[k] == "\\":
                k += 2
                continue
            depth += {"{": 1, "}": -1}.get(s[k], 0)
            if depth == 0:
                end = k
                break
            k += 1
        backslash = name > 0 and s[name - 1] == "\\"
        out.append((name - 1 if backslash else name, brace + 1, end, backslash))
    parents = []
    for i, (start, _, _, _) in enumerate(out):  # the innermost earlier box whose braces are open at `start`
        enclosing = [j for j in range(i) if out[j][1] <= start and (out[j][2] is None or start < out[j][2])]
        parents.append(enclosing[-1] if enclosing else -1)
    return [(a, c, e, p, b) for (a, c, e, b), p in zip(out, parents)]


box_text = st.lists(
    st.sampled_from(["\\boxed{", "\\fbox {", "boxed{", "\\\\boxed{", "fboxed{", "{", "}", "}", "\\{", "\\}", "\\\\",
                     "\\", "x", " ", ", ", "\\frac{1}{2}", "\\boxed", "\n"]),
    max_size=40,
).map("".join)


@settings(max_examples=500, deadline=None)
@given(box_text)
def test_scan_boxes_matches_each_box_read_on_its_own(text):
    assert [tuple(b) for b in scan_boxes(text)] == _reference_boxes(text)


def _python_lines(fn, arg):
    """How many lines of Python `fn(arg)` runs: a measure of work that does not depend on the load of the
    machine (the brace scan and the walk over the boxes are Python loops; a scan per box shows up here)."""
    count = 0

    def local(frame, event, _):
        nonlocal count
        count += event == "line"
        return local

    sys.settrace(lambda frame, event, _: local)
    try:
        fn(arg)
    finally:
        sys.settrace(None)
    return count


# (name, text for n, what extract_answer gives for n)
ADVERSARIAL_NESTING = [
    ("nested boxes", lambda n: "\\boxed{" * n + "7" + "}" * n, lambda n: "7"),
    ("nested boxes, the outermost unclosed", lambda n: "\\boxed{" * n + "7" + "}" * (n - 1), lambda n: "7"),
    ("nested boxes, none closed", lambda n: "\\boxed{" * n + "7", lambda n: None),
    ("a box of unclosed braces", lambda n: "\\boxed{" + "{" * n + "7", lambda n: None),
    ("unclosed braces between two boxes", lambda n: "\\boxed{1} " + "{" * n + " \\boxed{7}", lambda n: "7"),
    (
        "a list ending in nested boxes",
        lambda n: "\\boxed{7} and " + "\\fbox{" * n + "8" + "}" * n,
        lambda n: "7, 8",
    ),
    (
        "nested braces and boxes",
        lambda n: "\\boxed{" + "{\\fbox{" * n + "7" + "}}" * n + "}",
        lambda n: "{\\fbox{" * n + "7" + "}}" * n,
    ),
]


@pytest.mark.parametrize("name, make, expected", ADVERSARIAL_NESTING, ids=[c[0] for c in ADVERSARIAL_NESTING])
def test_nested_and_unbalanced_boxes_take_linear_work(name, make, expected):
    """Model output is adversarial: thousands of nested `\\boxed{` or of `{` that never close must cost work
    proportional to their length (finding the final boxes once took 2.5 s on 2000 nested boxes). Work is
    counted, not timed: 4 times the input may take at most 4.5 times the work (a rescan per box: ~16)."""
    work = {}
    for n in (1000, 2000, 4000):
        text = make(n)
        assert extract_answer(text) == expected(n)
        work[n] = _python_lines(extract_answer, text)
    assert work[2000] <= 2.25 * work[1000], work
    assert work[4000] <= 4.5 * work[1000], work


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_extraction_never_raises_and_returns_part_of_the_text(text):
    got = extract_answer(text)
    if got is not None:
        assert got and got == got.strip()
        clean = text.replace("\x00", "")
        clean_utf8 = clean.encode("utf-8", "replace").decode("utf-8")
        parts = got.split(", ")  # several boxes: each is in the text
        assert all(p in clean or p in clean_utf8 for p in parts)


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=-(10**12), max_value=10**12), noise)
def test_answer_line_takes_the_last_one(n, filler):
    text = f"Answer: {n + 1}\n{filler}\nAnswer: {n}\n"
    assert extract_answer(text) == str(n)


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
