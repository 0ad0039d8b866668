"""The text math-verify reads for one answer or ground truth: pure, linear-time string code.

`verifier_input` makes ONE inline formula `$...$`, which math-verify reads with `extraction_mode="first_match"`:
it parses the whole answer or nothing, so it cannot pick a number out of it (`4\\sqrt{2}` is not `4`, `x \\geq 5`
is not `5`). What is done here only makes that formula readable, where math-verify's own normalisation does not:

- line breaks, math delimiters (`$`, `$$`, `\\(`, `\\)`, `\\[`, `\\]`; not `\\$`) and markdown `**` become spaces;
  Unicode math (`−`, `×`, `≤`, `π`, `°`, `√`, thin spaces, ...) becomes LaTeX; `\\varnothing` is `\\emptyset`;
- a leading "the final answer is", a sentence after the answer without digits (`42. I hope it is correct.`),
  sentence punctuation and spacing commands at the end are dropped;
- a mixed number (an integer right before a proper fraction: `2\\frac{1}{4}`, `4 4/9`) is their sum, as in MATH;
- thousands written with a thin space or a space (`1\\,234`, `1 000`) become `1234`, ...;
- units: math-verify drops a final `\\text{...}` group, right for a unit (`5\\text{ cm}^2`), wrong for prose that
  carries an alternative (`4 \\text{ (or possibly 3)}`). A final group without digits and without "or"/"and" is a
  unit and is dropped here; anything else is unwrapped into plain text, so it stays part of the answer;
- a final percent sign (`20\\%`, `20%`, `20 percent`) goes after the formula, where math-verify reads it.
"""

import re
from functools import lru_cache

_UNICODE = str.maketrans({
    "\u2212": "-", "\u00d7": "\\times ", "\u00f7": "\\div ", "\u00b7": "\\cdot ", "\u22c5": "\\cdot ", "\u2264": "\\le ",
    "\u2265": "\\ge ", "\u2260": "\\ne ", "\u221e": "\\infty ", "\u03c0": "\\pi ", "\u00b0": "^\\circ ", "\u221a": "\\sqrt ",
    "\u00b1": "\\pm ", "\u2208": "\\in ", "\u222a": "\\cup ", "\u2229": "\\cap ", "\u2205": "\\emptyset ",
    "\u2009": " ", "\u202f": " ", "\u00a0": " ", "\u2005": " ", "\u2006": " ", "\r": " ", "\n": " ", "\t": " ",
})
_SPACES_RE = re.compile(r"\$\$|\\[\[\]()]|(?<!\\)\$|\*\*")  # math delimiters and bold
_CONNECTOR_RE = re.compile(
    r"(?:\s|,|;|&|~|\\quad|\\qquad|\\[,;:! ]|\\text\s*\{\s*(?:and|or)?\s*\}|\\\\|\*\*|\band\b|\bor\b"
    r"|(?<![A-Za-z])[A-Za-z](?:_\{?\w+\}?)?\s*(?:=|\\in\b))*",  # `x =`, `a_1 =`, `x \in`: names the next value
    re.IGNORECASE,
)
_LEAD_RE = re.compile(r"^(?:(?:so|thus|therefore|hence)\s*,?\s+)?(?:the\s+)?(?:final\s+)?answer\s*(?:is\s*:?|:|=)\s*",
                      re.IGNORECASE)
_SENTENCE_END_RE = re.compile(r"\.\s+(?=[A-Z])")
_DIGIT_RE = re.compile(r"\d")
# At the end of an answer, reversed: `\,` `\;` `\:` `\!` `\quad` `\qquad` `\\`, punctuation, a lone backslash.
_TRAIL_REVERSED_RE = re.compile(r"(?:[,;:!]\\|dauqq?\\|\\\\|[ .,;~]|\\)*")
_SEP = r"(?:\\[,;: ]|~|\\thinspace|\\medspace| )"  # between groups of 3 digits
_THOUSANDS_RE = re.compile(r"(?<![\d.,{}^_a-zA-Z\\])(\d{1,3})((?:" + _SEP + r"\d{3})+)(?![\d}])")
_SEP_RE = re.compile(_SEP)
_MIXED_LATEX_RE = re.compile(r"(?<![\w.}^_\\])(\d+)\s*\\[dtc]?frac\s*\{\s*(\d+)\s*\}\s*\{\s*(\d+)\s*\}")
_MIXED_PLAIN_RE = re.compile(r"(?<![\w.}^_/\\])(\d+)\s+(\d+)/(\d+)(?![\d/.])")
_TEXT = r"\\(?:text(?:normal|bf|it|rm)?|math(?:rm|it|bf)|mbox)"  # what math-verify's unit rule reads as `\text`
_TEXT_CMD_RE = re.compile(_TEXT + r"\{")
_TEXT_GROUP_RE = re.compile(_TEXT + r"\s*\{([^{}]*)\}")
_UNIT = _TEXT + r"\{[^{}\d]*\}(?:\^(?:\d|\{\d\}|\\circ|\{\\circ\}))?"
_UNIT_TAIL_RE = re.compile(_UNIT + r"(?:\s*(?:(?:/|\\cdot|\\times)\s*)?" + _UNIT + r")*")
_ENDS_LIKE_UNIT_RE = re.compile(r"\}(?:\^\d|\{\^\d\})?$")
_PERCENT_RE = re.compile(r"(?:\\%|%|\\text\{ ?(?:percent|percentage|pct) ?\}|\b(?:percent|percentage|pct))$", re.I)
EMPTY_INPUT = "$$"  # what `verifier_input` gives for a text with nothing left to grade (`$ $`, `\\,`, `Answer:`, `.`)


def is_connector(gap: str) -> bool:
    """True when `gap` joins two answers into a list: commas, semicolons, `and`, `or`, spacing, math
    delimiters, `\\text{and}`, `x =`. Any other word or a full stop separates them."""
    return len(gap) <= 200 and _CONNECTOR_RE.fullmatch(_SPACES_RE.sub(" ", gap)) is not None


def _first_sentence(text: str) -> str:
    """The first sentence end outside braces, when no digit follows it (brace depth kept as it goes: linear)."""
    depth, pos = 0, 0
    for m in _SENTENCE_END_RE.finditer(text):
        depth += text.count("{", pos, m.start()) - text.count("}", pos, m.start())
        pos = m.start()
        if depth == 0:
            return text[: m.start()] if not _DIGIT_RE.search(text, m.end()) else text
    return text


def _strip_end(text: str) -> str:
    """Drop sentence punctuation, spaces and spacing commands at the end: one anchored match on the reversed text."""
    return text[: len(text) - _TRAIL_REVERSED_RE.match(text[::-1]).end()]


def _mixed(m: re.Match) -> str:
    whole, num, den = m.group(1), int(m.group(2)), int(m.group(3))
    return f"({whole}+\\frac{{{num}}}{{{den}}})" if 0 < num < den else m.group(0)


def _units(text: str) -> str:
    """Keep math-verify's unit rule from dropping anything but a unit (see the module doc)."""
    m = _TEXT_CMD_RE.search(text)
    if m is None or not text[: m.start()].strip() or not _ENDS_LIKE_UNIT_RE.search(text):
        return text
    tail = text[m.start() :]
    if len(tail) <= 200 and _UNIT_TAIL_RE.fullmatch(tail) and not re.search(r"\b(?:or|and)\b", tail, re.I):
        return _strip_end(text[: m.start()])
    return text[: m.start()] + _TEXT_GROUP_RE.sub(lambda g: g.group(1), tail)


@lru_cache(maxsize=4096)
def verifier_input(text: str) -> str:
    """The string handed to math-verify's `parse` for an extracted answer or a ground truth: one inline
    formula `$...$` (a percent sign after it). Total: never raises on a str."""
    t = _SPACES_RE.sub(" ", text.translate(_UNICODE)).replace("\\varnothing", "\\emptyset").strip()
    t = _strip_end(_LEAD_RE.sub("", _first_sentence(t)))
    t = _THOUSANDS_RE.sub(lambda m: m.group(1) + _SEP_RE.sub("", m.group(2)), t)
    t = _MIXED_PLAIN_RE.sub(_mixed, _MIXED_LATEX_RE.sub(_mixed, t))
    percent = _PERCENT_RE.search(t, max(0, len(t) - 24))
    suffix = ""
    if percent and t[: percent.start()].strip():
        t, suffix = t[: percent.start()], "\\%"
    return "$" + _strip_end(_units(t)).strip() + "$" + suffix
