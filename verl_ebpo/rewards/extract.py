"""Answer extraction from a model's output: pure, linear-time string code (no math-verify here).

- the LAST `\\boxed{...}` or `\\fbox{...}` (balanced braces; `\\{` and `\\}` do not count);
- else the last `Answer: ...` line (the DAPO-Math prompt format, same pattern as verl's math_dapo);
- else no answer.

Only the last box is considered: if its braces never close (a truncated output), there is no boxed answer
and the `Answer:` line, if any, is used.
"""

from __future__ import annotations

import re
from decimal import Decimal
from fractions import Fraction
from numbers import Integral, Real
from typing import Any, NamedTuple, Optional

_BOX_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BRACE_TOKEN_RE = re.compile(r"\\.|[{}]", re.DOTALL)
# verl's math_dapo uses r"(?i)Answer\s*:\s*([^\n]+)"; the text after the colon is cut by hand (a regex
# tail like `\s*([^\n]*\S)` backtracks quadratically on long runs of spaces).
_ANSWER_RE = re.compile(r"(?i)answer\s*:")


class Extracted(NamedTuple):
    kind: str  # "boxed" | "answer_line"
    text: str


def _balanced_from(s: str, start: int) -> Optional[str]:
    """Text from `start` (just after a `{`) to its matching `}`; None if it never closes. Linear time."""
    depth = 1
    for m in _BRACE_TOKEN_RE.finditer(s, start):
        tok = m.group()
        if tok == "{":
            depth += 1
        elif tok == "}":
            depth -= 1
            if depth == 0:
                return s[start : m.start()]
        # else an escaped character (`\{`, `\}`, `\\`, ...): does not count
    return None


def last_boxed(s: str) -> Optional[str]:
    """Content of the last `\\boxed{...}`/`\\fbox{...}` in `s`, or None (none, or its braces never close)."""
    last = None
    for last in _BOX_RE.finditer(s):
        pass
    if last is None:
        return None
    return _balanced_from(s, last.end())


def last_answer_line(s: str) -> Optional[str]:
    """Text after the last `Answer:` (case-insensitive; the answer may start on the next line) up to the
    end of its line, or None. The last `Answer:` followed by some text wins."""
    ends = [m.end() for m in _ANSWER_RE.finditer(s)]
    for end in reversed(ends):
        rest = s[end:].lstrip()
        nl = rest.find("\n")
        text = (rest if nl < 0 else rest[:nl]).strip()
        if text:
            return text
    return None


def extract_answer(solution: Any) -> Optional[Extracted]:
    """The answer a model gave (see module doc). Never raises: non-strings are coerced, NULs dropped."""
    s = to_text(solution)
    if not s:
        return None
    boxed = last_boxed(s)
    if boxed is not None and boxed.strip():
        return Extracted("boxed", boxed.strip())
    line = last_answer_line(s)
    if line is not None:
        return Extracted("answer_line", line)
    return None


def to_text(x: Any) -> str:
    """Model output as a clean str: bytes decoded with replacement, NULs and lone surrogates removed."""
    if x is None:
        return ""
    if isinstance(x, bytes):
        s = x.decode("utf-8", "replace")
    elif isinstance(x, str):
        s = x
    else:
        try:
            s = str(x)
        except Exception:
            return ""
    if "\x00" in s:
        s = s.replace("\x00", "")
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        s = s.encode("utf-8", "replace").decode("utf-8")
    return s


def ground_truth_texts(ground_truth: Any) -> list[str]:
    """The acceptable answers of a data row as strings.

    A string (with or without `\\boxed{}`), a number, or a list/tuple/array of those (any one is correct).
    Raises ValueError naming the problem for None, empty, non-finite or unsupported values: that is a
    dataset error, not model output.
    """
    items: list[Any]
    if isinstance(ground_truth, (list, tuple)):
        items = list(ground_truth)
    elif type(ground_truth).__name__ == "ndarray":  # numpy array from a parquet column, without importing numpy
        items = list(ground_truth.tolist()) if ground_truth.ndim > 0 else [ground_truth.item()]
    else:
        items = [ground_truth]
    if not items:
        raise ValueError(f"ground_truth is an empty list: {ground_truth!r}")
    out = []
    for item in items:
        out.append(_one_truth(item, ground_truth))
    return out


def _one_truth(x: Any, whole: Any) -> str:
    if hasattr(x, "item") and type(x).__module__ == "numpy":  # numpy scalar
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
    if "\\boxed" in s or "\\fbox" in s:
        inner = last_boxed(s)
        if inner is not None and inner.strip():
            s = inner.strip()
    if not s:
        raise ValueError(f"ground_truth is empty: {whole!r}")
    return s
