"""Answer extraction from a model's output, and a data row's ground truths: pure, linear-time string code.

- The final boxes: the last `\\boxed{...}` or `\\fbox{...}` (balanced braces; `\\{` and `\\}` do not count), with
  the boxes right before it joined to it only by commas, `and`, `or`, spacing or math delimiters (`the solutions
  are \\boxed{(2,2)} and \\boxed{(6,2)}`): one list answer. A box followed by other words is an intermediate result.
- The last `Answer: ...` line (the DAPO-Math prompt format, as verl's math_dapo reads it).
- When both are there, the later one is the answer, but an `Answer:` only counts as coming after the boxes when it
  starts a line or a sentence (`**Answer:**`, `... . Final Answer:`). If the last box never closes (a truncated
  output), the `Answer:` line, if any, is used.
"""

import re
from decimal import Decimal
from fractions import Fraction
from numbers import Integral, Real
from typing import Any

import numpy as np

from verl_ebpo.rewards.normalize import is_connector

_TOKEN_RE = re.compile(r"[{}]|\\[\\{}]")  # braces, and the escapes that hide one (`\{`, `\}`, `\\`)
_OPENER_RE = re.compile(r"(?:boxed|fbox)\s*\{")  # `\boxed{`, `\fbox {`, or a box that lost its backslash
_MARKUP = " \t*#>_"  # may come between the start of a sentence and `Answer:` (`**Final Answer:**`)


def scan_boxes(s: str) -> list[tuple[int, int, int | None, int, bool]]:
    """Every box in `s` by position: (start (its backslash, if any), just after its `{`, index of its matching `}`
    or None, index of the innermost box open around it or -1, whether it has its backslash). One forward pass with
    a stack of the open braces: linear in len(s) whatever the nesting."""
    openers = {m.end() - 1: m.start() for m in _OPENER_RE.finditer(s)}  # `{` -> its box's name
    boxes: list[list] = []
    stack: list[int] = []  # per open `{`: the index of its box, or -1 for a plain brace
    open_boxes: list[int] = []  # the boxes among them, innermost last
    for m in _TOKEN_RE.finditer(s, min(openers, default=len(s))):
        if m.group() == "{":
            name = openers.get(m.start())
            if name is None:
                stack.append(-1)
                continue
            backslash = name > 0 and s[name - 1] == "\\"
            boxes.append([name - backslash, m.end(), None, open_boxes[-1] if open_boxes else -1, backslash])
            stack.append(len(boxes) - 1)
            open_boxes.append(len(boxes) - 1)
        elif m.group() == "}" and stack and stack.pop() >= 0:
            boxes[open_boxes.pop()][2] = m.start()
    return [tuple(box) for box in boxes]


def _strip_span(s: str, a: int, b: int) -> tuple[int, int]:
    while a < b and s[a].isspace():
        a += 1
    while b > a and s[b - 1].isspace():
        b -= 1
    return a, b


def final_boxes(s: str) -> tuple[int, list[str]] | None:
    """(end of the last box, stripped contents of the final boxes in order, empty ones and repeats dropped), or None
    (no box, or the last box never closes). Walks back from the last box: one that encloses the first of the list
    replaces it (`\\boxed{\\boxed{3}}`); one that ends before it joins the list when only connectors lie between."""
    boxes = scan_boxes(s)
    if not boxes or boxes[-1][2] is None:
        return None
    run = [len(boxes) - 1]  # the boxes of the final answer, the last box first
    for i in range(len(boxes) - 2, -1, -1):
        (_, _, end, _, _), (first_start, _, first_end, _, _) = boxes[i], boxes[run[-1]]
        if end is None:
            break
        if end > first_end and len(run) == 1:  # encloses the final box
            run[0] = i
        elif end < first_start and is_connector(s[end + 1 : first_start]):
            run.append(i)
        elif end < first_start:
            break  # else inside a box of the list (a nested box): not a separate answer
    contents: list[str] = []
    for i in reversed(run):
        a, b = _strip_span(s, boxes[i][1], boxes[i][2])
        j = i + 1  # a box that is all of the content is the answer: the first box opened inside box i is i + 1
        while j < len(boxes) and boxes[j][3] == j - 1 and boxes[j][0] == a and boxes[j][2] == b - 1:
            a, b = _strip_span(s, boxes[j][1], boxes[j][2])
            j += 1
        if a < b and s[a:b] not in contents:
            contents.append(s[a:b])
    return boxes[run[0]][2], contents


def _starts_sentence(s: str, pos: int) -> bool:
    """Whether `Answer:` at `pos` starts a line or a sentence (`**Final Answer:**`), not prose ("check the answer:")."""
    j = pos
    while j > 0 and s[j - 1] in _MARKUP:
        j -= 1
    if s[max(0, j - 5) : j].lower() == "final":
        j -= 5
        while j > 0 and s[j - 1] in _MARKUP:
            j -= 1
    return j == 0 or s[j - 1] in "\n.!?"


def _last_answer(s: str) -> tuple[int, str] | None:
    """(position of `Answer:`, the text after it) of the last `Answer:` (also `Answer**:`; any case) followed by some
    text (the answer may start on the next line), or None. Walks back over the colons (a case-insensitive regex
    scan is slower, and a tail like `\\s*([^\\n]*\\S)` backtracks quadratically on long runs of spaces)."""
    colon = len(s)
    while (colon := s.rfind(":", 0, colon)) >= 0:
        k = colon
        while k > 0 and s[k - 1] in " \t\r\n*" and colon - k < 64:
            k -= 1
        if s[max(0, k - 6) : k].lower() != "answer":
            continue
        rest = s[colon + 1 :].lstrip().lstrip("*").lstrip()  # `**Answer:** 7`
        text = rest.split("\n", 1)[0].strip()
        for opener, closer in (("\\[", "\\]"), ("$$", "$$")):  # display math over several lines
            if text.startswith(opener) and closer not in text[len(opener) :]:
                end = rest.find(closer, len(opener), 2000)
                text = rest[: end + len(closer)].strip() if end > 0 else text
        if text:
            return k - 6, text
    return None


def extract_answer(solution: Any) -> str | None:
    """The answer a model gave (see module doc; several final boxes joined with ", "), or None. Never raises:
    non-strings are coerced, NULs dropped."""
    s = to_text(solution)
    boxes, line = final_boxes(s), _last_answer(s)
    if boxes is not None and boxes[1] and (line is None or not (line[0] > boxes[0] and _starts_sentence(s, line[0]))):
        return ", ".join(boxes[1])
    return None if line is None else line[1]


def to_text(x: Any) -> str:
    """Model output as a clean str: bytes decoded with replacement, NULs and lone surrogates removed."""
    if isinstance(x, bytes):
        x = x.decode("utf-8", "replace")
    return ("" if x is None else str(x)).replace("\x00", "").encode("utf-8", "replace").decode("utf-8")


def ground_truth_texts(ground_truth: Any) -> list[str]:
    """The acceptable answers of a data row as strings: a string (a worked solution with `\\boxed{}` is read like a
    model's output, its final boxes), a number, or a list/tuple/array of those (any one is correct). ValueError
    naming the problem for None, empty, non-finite or unsupported values: a dataset error, not model output."""
    if isinstance(ground_truth, np.ndarray):  # a parquet column's value
        ground_truth = ground_truth.tolist() if ground_truth.ndim else [ground_truth.item()]
    items = list(ground_truth) if isinstance(ground_truth, (list, tuple)) else [ground_truth]
    if not items:
        raise ValueError(f"ground_truth is an empty list: {ground_truth!r}")
    return [_one_truth(item.item() if isinstance(item, np.generic) else item, ground_truth) for item in items]


def _one_truth(x: Any, whole: Any) -> str:
    if isinstance(x, bool) or not isinstance(x, (str, bytes, Real, Decimal)):
        raise ValueError(f"ground_truth must be a string or a number, got {type(x).__name__} {x!r} (in {whole!r})")
    if isinstance(x, (Integral, Fraction)):
        return str(x if isinstance(x, Fraction) else int(x))
    if isinstance(x, (Real, Decimal)):
        d = x if isinstance(x, Decimal) else Decimal(repr(float(x)))
        if not d.is_finite():
            raise ValueError(f"ground_truth must be finite, got {x!r}")
        return format(d, "f")
    s = to_text(x).strip()
    if not s:
        raise ValueError(f"ground_truth is empty: {whole!r}")
    if "\\boxed" in s or "\\fbox" in s:  # a worked solution: its final boxes (none that close: nothing)
        boxes = final_boxes(s)
        s = ", ".join(boxes[1]) if boxes else ""
    return s
