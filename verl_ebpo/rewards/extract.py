"""Answer extraction from a model's output: pure, linear-time string code (no math-verify here).

- The final boxes: the last `\\boxed{...}` or `\\fbox{...}` (balanced braces; `\\{` and `\\}` do not count),
  together with the boxes right before it that are joined to it only by commas, `and`, `or`, spacing or math
  delimiters (`the solutions are \\boxed{(2,2)} and \\boxed{(6,2)}`): one list answer. A box followed by
  other words or a full stop is an intermediate result, not part of the final answer.
- The last `Answer: ...` line (the DAPO-Math prompt format, same pattern as verl's math_dapo).
- When both are there, the later one is the answer, but an `Answer:` only counts as coming after the boxes
  when it starts a line or a sentence (`**Answer:**`, `... . Final Answer:`); "check the answer: ..." in
  prose after a box does not replace the box. Else whichever is there; else no answer.

If the last box's braces never close (a truncated output), there is no boxed answer and the `Answer:` line,
if any, is used. What math-verify then reads is `verl_ebpo.rewards.normalize.verifier_input(text)`.
"""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction
from numbers import Integral, Real
from typing import Any, NamedTuple, Optional

import numpy as np

from verl_ebpo.rewards.boxes import scan_boxes
from verl_ebpo.rewards.normalize import is_connector

# verl's math_dapo uses r"(?i)Answer\s*:\s*([^\n]+)"; here the colons are walked back by hand (faster than a
# case-insensitive scan of the whole output) and the text after the colon is cut by hand (a regex tail like
# `\s*([^\n]*\S)` backtracks quadratically on long runs of spaces).
# Markup that may come between the start of a sentence and `Answer:` (`**Final Answer:**`, `> ### Answer:`).
_MARKUP = " \t*#>_"


class Extracted(NamedTuple):
    kind: str  # "boxed" | "boxes" (several final boxes, joined with ", ") | "answer_line"
    text: str


def _strip_span(s: str, a: int, b: int) -> tuple[int, int]:
    """The span of `s[a:b].strip()`, without copying."""
    while a < b and s[a].isspace():
        a += 1
    while b > a and s[b - 1].isspace():
        b -= 1
    return a, b


def final_boxes(s: str) -> Optional[tuple[int, list[str]]]:
    """(end of the last box, contents of the final boxes in order) or None: no box, or the last box never
    closes. Contents are stripped; empty ones and repeats are dropped.

    Walks back from the last box: an earlier box that encloses the current first one replaces it
    (`\\boxed{\\boxed{3}}`); one that ends before it joins the list when only connectors lie between; anything
    else ends the list. Linear time: the boxes and their braces come from one pass (`boxes.scan_boxes`)."""
    boxes = scan_boxes(s)
    if not boxes or boxes[-1].end is None:
        return None  # no box, or the last box never closes (a truncated output)
    run = [len(boxes) - 1]  # indices of the boxes of the final answer, the last box first
    for i in range(len(boxes) - 2, -1, -1):
        box = boxes[i]
        if box.end is None:
            break
        first = boxes[run[-1]]
        if box.end > first.end and len(run) == 1:  # encloses the final box
            run[0] = i
        elif box.end < first.start and is_connector(s[box.end + 1 : first.start]):
            run.append(i)
        elif box.end > first.start:  # inside a box of the list (a nested box): not a separate answer
            continue
        else:
            break
    contents: list[str] = []
    seen: set[str] = set()
    for i in reversed(run):
        a, b = _strip_span(s, boxes[i].content_start, boxes[i].end)
        # `\\boxed{\\boxed{3}}`: a box that is all of the content is the answer. The first box opened inside
        # box i is box i + 1; it is all of the content when it starts at the content and closes at its end.
        j = i + 1
        while j < len(boxes) and boxes[j].parent == j - 1 and boxes[j].start == a and boxes[j].end == b - 1:
            a, b = _strip_span(s, boxes[j].content_start, boxes[j].end)
            j += 1
        text = s[a:b]
        if text and text not in seen:
            seen.add(text)
            contents.append(text)
    return boxes[run[0]].end, contents


def _starts_sentence(s: str, pos: int) -> bool:
    """Whether `Answer:` at `pos` starts a line or a sentence (`**Final Answer:**`, `... . Final Answer:`),
    as opposed to prose like "check the answer: ..."."""
    j = pos
    while j > 0 and s[j - 1] in _MARKUP:
        j -= 1
    if s[max(0, j - 5) : j].lower() == "final":
        j -= 5
        while j > 0 and s[j - 1] in _MARKUP:
            j -= 1
    return j == 0 or s[j - 1] in "\n.!?"


def _last_answer(s: str) -> Optional[tuple[int, bool, str]]:
    """(position of `Answer:`, whether it starts a line or sentence, the text after it) of the last `Answer:`
    (also `Answer**:`; any case) followed by some text (the answer may start on the next line), or None.
    Walks back over the colons; each character is looked at a bounded number of times."""
    pos = len(s)
    while True:
        colon = s.rfind(":", 0, pos)
        if colon < 0:
            return None
        pos = colon
        k = colon
        while k > 0 and s[k - 1] in " \t\r\n*" and colon - k < 64:
            k -= 1
        if s[max(0, k - 6) : k].lower() != "answer":
            continue
        rest = s[colon + 1 :].lstrip()
        if rest.startswith("**"):  # `**Answer:** 7`
            rest = rest.lstrip("*").lstrip()
        nl = rest.find("\n")
        text = (rest if nl < 0 else rest[:nl]).strip()
        for opener, closer in (("\\[", "\\]"), ("$$", "$$")):  # display math over several lines
            if text.startswith(opener) and closer not in text[len(opener) :]:
                end = rest.find(closer, len(opener), 2000)
                if end > 0:
                    text = rest[: end + len(closer)].strip()
        if text:
            return k - 6, _starts_sentence(s, k - 6), text


def extract_answer(solution: Any) -> Optional[Extracted]:
    """The answer a model gave (see module doc). Never raises: non-strings are coerced, NULs dropped."""
    s = to_text(solution)
    if not s:
        return None
    boxes = final_boxes(s)
    line = _last_answer(s)
    if boxes is not None and boxes[1]:
        box_end, contents = boxes
        if line is None or not (line[1] and line[0] > box_end):
            if len(contents) == 1:
                return Extracted("boxed", contents[0])
            return Extracted("boxes", ", ".join(contents))
    if line is not None:
        return Extracted("answer_line", line[2])
    return None


def to_text(x: Any) -> str:
    """Model output as a clean str: bytes decoded with replacement, NULs and lone surrogates removed."""
    if isinstance(x, bytes):
        x = x.decode("utf-8", "replace")
    try:
        s = "" if x is None else str(x)
    except Exception:
        return ""
    return s.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")


def ground_truth_texts(ground_truth: Any) -> list[str]:
    """The acceptable answers of a data row as strings.

    A string (with or without `\\boxed{}`), a number, or a list/tuple/array of those (any one is correct).
    Raises ValueError naming the problem for None, empty, non-finite or unsupported values: that is a
    dataset error, not model output.
    """
    items: list[Any]
    if isinstance(ground_truth, (list, tuple)):
        items = list(ground_truth)
    elif isinstance(ground_truth, np.ndarray):  # a parquet column's value
        items = list(ground_truth.tolist()) if ground_truth.ndim > 0 else [ground_truth.item()]
    else:
        items = [ground_truth]
    if not items:
        raise ValueError(f"ground_truth is an empty list: {ground_truth!r}")
    return [_one_truth(item, ground_truth) for item in items]


def _one_truth(x: Any, whole: Any) -> str:
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, bytes):
        x = x.decode("utf-8", "replace")
    if isinstance(x, bool) or x is None:
        raise ValueError(f"ground_truth must be a string or a number, got {x!r} (in {whole!r})")
    if isinstance(x, Integral):
        return str(int(x))
    if isinstance(x, Fraction):
        return f"{x.numerator}/{x.denominator}" if x.denominator != 1 else str(x.numerator)
    if isinstance(x, (Real, Decimal)):
        d = Decimal(repr(float(x))) if not isinstance(x, Decimal) else x
        if not d.is_finite():
            raise ValueError(f"ground_truth must be finite, got {x!r}")
        return format(d, "f")
    if not isinstance(x, str):
        raise ValueError(f"ground_truth must be a string or a number, got {type(x).__name__} {x!r}")
    s = to_text(x).strip()
    if "\\boxed" in s or "\\fbox" in s:  # a worked solution: its final boxes, read like a model's
        boxes = final_boxes(s)
        if boxes is not None and boxes[1]:
            s = ", ".join(boxes[1])
    if not s:
        raise ValueError(f"ground_truth is empty: {whole!r}")
    return s
