"""The text math-verify reads for one answer: pure, fast string code (no math-verify import here).

Every answer, from a box, from several boxes or from an `Answer:` line, and every ground truth goes through
`verifier_input` and then to math-verify as ONE inline formula, read with `extraction_mode="first_match"`.
So math-verify parses the whole answer or nothing: it cannot pick a number out of it (`4\\sqrt{2}` is not
`4`, `x \\geq 5` is not `5`). What is done here only makes that formula readable:

- line breaks become spaces; Unicode math (`−`, `×`, `÷`, `·`, `≤`, `≥`, `≠`, `∞`, `π`, `°`, `√`, `±`, `∈`,
  `∪`, thin and no-break spaces) becomes LaTeX; markdown emphasis (`**`) is dropped;
- math delimiters (`$...$`, `$$...$$`, `\\(...\\)`, `\\[...\\]`): the math inside is the answer. Prose around it
  is dropped when it has no digits ("The answer is $5$."). Several math pieces joined only by commas, `and`,
  `or` are one list (`$x=1$ or $x=2$`: a set, see the hedging rule in docs/reward.md); separated by other
  words, or with digits in the prose, the whole text is the answer (delimiters removed);
- a sentence after the answer (`42. I hope it is correct.`) is dropped when it has no digits;
- inner `\\boxed{...}` / `\\fbox{...}` are unwrapped; a leading "the final answer is" and a leading
  `\\text{...}` without digits are dropped; sentence punctuation (`.` `,` `;`) and spacing commands at the end
  are dropped;
- a mixed number (an integer right before a proper fraction of integers: `2\\frac{1}{4}`, `4 4/9`) is
  their sum, as in MATH's answers (`2\\frac{1}{4}` = 9/4, not 1/2);
- thousands written with a thin space or a space (`1\\,234`, `1 000`, `12\\;345\\;678`) become `1234`, ...;
- units: math-verify drops a final `\\text{...}` group (everything from the first `\\text{` on, when the
  formula ends with `}`). That is right for a unit (`5\\text{ cm}^2`) and wrong for prose that carries an
  alternative (`4 \\text{ (or possibly 3)}`). A final group without digits and without "or"/"and" is a unit
  and is dropped here; anything else is unwrapped into plain text, so it stays part of the answer;
- a final percent sign (`20\\%`, `20%`, `20 percent`) is put after the formula, where math-verify reads it
  (`$20$\\%`).
"""

from __future__ import annotations

import re
from functools import lru_cache

from verl_ebpo.rewards.boxes import scan_boxes

# Unicode math as LaTeX; the minus sign; thin, narrow no-break, no-break, four- and six-per-em spaces.
_UNICODE = str.maketrans({
    "\u2212": "-", "\u00d7": "\\times ", "\u00f7": "\\div ", "\u00b7": "\\cdot ", "\u22c5": "\\cdot ", "\u2264": "\\le ",
    "\u2265": "\\ge ", "\u2260": "\\ne ", "\u221e": "\\infty ", "\u03c0": "\\pi ", "\u00b0": "^\\circ ", "\u221a": "\\sqrt ",
    "\u00b1": "\\pm ", "\u2208": "\\in ", "\u222a": "\\cup ", "\u2229": "\\cap ", "\u2205": "\\emptyset ",
    "\u2009": " ", "\u202f": " ", "\u00a0": " ", "\u2005": " ", "\u2006": " ",
})

# Math delimiters, longest first: (opener, closer, whether a backslash before the opener/closer escapes it).
# `\$` (an escaped dollar, i.e. currency) is not a delimiter.
_DELIMS = (("$$", "$$", True), ("\\[", "\\]", False), ("\\(", "\\)", False), ("$", "$", True))
_OPENER_RE = re.compile(r"\$|\\[\[(]")


def _delimited(text: str) -> list[tuple[int, int, str]]:
    """(start, end, math inside) of each delimited piece, left to right, as a lazy regex over the alternatives
    would find them, in linear time: the next closer of each kind is looked up once per stretch of text (a regex
    rescans the rest of the text for every opener that never closes: 20,000 unclosed `\\(` cost seconds)."""
    found, pos, memo = [], 0, {}  # memo: closer -> (searched from, next closer at or after it, or -1)

    def closer_at(closer: str, start: int, escapable: bool) -> int:
        was = memo.get(closer)
        if was is not None and was[0] <= start and (was[1] < 0 or start <= was[1]):
            return was[1]
        q = text.find(closer, start)
        while q > 0 and escapable and text[q - 1] == "\\":
            q = text.find(closer, q + 1)
        memo[closer] = (start, q)
        return q

    for m in _OPENER_RE.finditer(text):
        p = m.start()
        if p < pos or (m.group() == "$" and p > 0 and text[p - 1] == "\\"):
            continue
        for opener, closer, escapable in _DELIMS:
            if text.startswith(opener, p):
                q = closer_at(closer, p + len(opener) + 1, escapable)
                if q >= 0:
                    found.append((p, q + len(closer), text[p + len(opener) : q]))
                    pos = q + len(closer)
                    break
    return found


_CONNECTOR_RE = re.compile(
    r"(?:\s|,|;|&|~|\\quad|\\qquad|\\[,;:! ]|\\text\s*\{\s*(?:and|or)?\s*\}|\\\\|\*\*|\band\b|\bor\b"
    r"|(?<![A-Za-z])[A-Za-z](?:_\{?\w+\}?)?\s*(?:=|\\in\b))*",  # `x =`, `a_1 =`, `x \in`: names the next value
    re.IGNORECASE,
)
_LEAD_PHRASE_RE = re.compile(
    r"^(?:(?:so|thus|therefore|hence)\s*,?\s+)?(?:the\s+)?(?:final\s+)?answer\s*(?:is\s*:?|:|=)\s*", re.IGNORECASE
)
_LEAD_TEXT_RE = re.compile(
    r"^\\text(?:normal|bf|it|rm)?\s*\{\s*(?:the\s+)?(?:final\s+)?answer\s*(?:is)?\s*:?\s*\}\s*", re.IGNORECASE
)
_TRAIL_COMMANDS = ("\\qquad", "\\quad", "\\\\", "\\,", "\\;", "\\:", "\\!")
# Thousands separated by a thin space (`\,`), other LaTeX spaces, `~` or a plain space: groups of 3 digits.
_SEP = r"(?:\\[,;: ]|~|\\thinspace|\\medspace| )"
_THOUSANDS_RE = re.compile(r"(?<![\d.,{}^_a-zA-Z\\])(\d{1,3})((?:" + _SEP + r"\d{3})+)(?![\d}])")
_SEP_RE = re.compile(_SEP)
_DIGIT_RE = re.compile(r"\d")
_DOLLAR_RE = re.compile(r"(?<!\\)\$")
# What math-verify's unit rule looks at (after it maps \mathrm, \textbf, ... to \text).
_TEXT_CMD_RE = re.compile(r"\\(?:text(?:normal|bf|it|rm)?|math(?:rm|it|bf)|mbox)\{")
_ENDS_LIKE_UNIT_RE = re.compile(r"\}(?:\^\d|\{\^\d\})?$")
_TEXT_GROUP_RE = re.compile(r"\\(?:text(?:normal|bf|it|rm)?|math(?:rm|it|bf)|mbox)\s*\{([^{}]*)\}")
_UNIT_GROUP = r"\\(?:text(?:normal|bf|it|rm)?|math(?:rm|it|bf)|mbox)\{[^{}\d]*\}(?:\^(?:\d|\{\d\}|\\circ|\{\\circ\}))?"
_UNIT_TAIL_RE = re.compile(_UNIT_GROUP + r"(?:\s*(?:(?:/|\\cdot|\\times)\s*)?" + _UNIT_GROUP + r")*")
_CONNECTIVE_WORD_RE = re.compile(r"\b(?:or|and)\b", re.IGNORECASE)
_PERCENT_RE = re.compile(r"(?:\\%|%|\\text\{ ?(?:percent|percentage|pct) ?\}|\b(?:percent|percentage|pct))$", re.IGNORECASE)


def _unbox(text: str) -> str:
    """`\\boxed{X}` -> `X` for every box, nested ones too (balanced braces; `\\{` does not count; an unclosed
    box loses only its opener; a `boxed{` without its backslash stays). One linear pass (`boxes.scan_boxes`)."""
    cuts = []
    for box in scan_boxes(text):
        if box.backslash:
            cuts.append((box.start, box.content_start))
            if box.end is not None:
                cuts.append((box.end, box.end + 1))
    if not cuts:
        return text
    cuts.sort()
    pieces = []
    pos = 0
    for a, b in cuts:
        pieces.append(text[pos:a])
        pos = b
    pieces.append(text[pos:])
    return "".join(pieces)


def is_connector(gap: str) -> bool:
    """True when `gap` joins two answers into a list: commas, semicolons, `and`, `or`, spacing, math
    delimiters, `\\text{and}`. Any other word or a full stop separates them."""
    gap = gap.replace("$", " ").replace("\\(", " ").replace("\\)", " ").replace("\\[", " ").replace("\\]", " ")
    return len(gap) <= 200 and _CONNECTOR_RE.fullmatch(gap) is not None


def _math_pieces(text: str) -> str:
    """The answer inside math delimiters (see the module doc)."""
    pieces = _delimited(text)
    if not pieces:
        return text
    ends = [0] + [b for _, b, _ in pieces]
    prose = [text[a:b] for a, b in zip(ends, [a for a, _, _ in pieces] + [len(text)])]
    whole = "".join(p + " " + m + " " for p, (_, _, m) in zip(prose, pieces)) + prose[-1]
    if any(_DIGIT_RE.search(p) for p in prose):
        return whole  # numbers outside the math: all of it is the answer
    if not all(is_connector(p) for p in prose[1:-1]):
        return whole  # math pieces separated by words: ambiguous, all of it is the answer
    return ", ".join(m.strip() for _, _, m in pieces)


_SENTENCE_END_RE = re.compile(r"\.\s+(?=[A-Z])")


def _first_sentence(text: str) -> str:
    """`42. I hope it is correct.` -> `42`: a sentence after the answer is dropped when it has no digits.
    The first sentence end outside braces counts (brace depth kept as it goes: linear)."""
    depth, pos = 0, 0
    for m in _SENTENCE_END_RE.finditer(text):
        depth += text.count("{", pos, m.start()) - text.count("}", pos, m.start())
        pos = m.start()
        if depth == 0:
            return text[: m.start()] if not _DIGIT_RE.search(text, m.end()) else text
    return text


# A mixed number: an integer right before a proper fraction of integers (`2\frac{1}{4}`, `4 4/9`).
_MIXED_LATEX_RE = re.compile(r"(?<![\w.}^_\\])(\d+)\s*\\[dtc]?frac\s*\{\s*(\d+)\s*\}\s*\{\s*(\d+)\s*\}")
_MIXED_PLAIN_RE = re.compile(r"(?<![\w.}^_/\\])(\d+)\s+(\d+)/(\d+)(?![\d/.])")


def _mixed(m: re.Match) -> str:
    whole, num, den = m.group(1), int(m.group(2)), int(m.group(3))
    if not 0 < num < den:
        return m.group(0)
    return "(" + whole + "+\\frac{" + str(num) + "}{" + str(den) + "})"


def _mixed_numbers(text: str) -> str:
    if "/" not in text and "frac" not in text:
        return text
    return _MIXED_PLAIN_RE.sub(_mixed, _MIXED_LATEX_RE.sub(_mixed, text))


def _thousands(text: str) -> str:
    if " " not in text and "\\" not in text and "~" not in text:
        return text
    return _THOUSANDS_RE.sub(lambda m: m.group(1) + _SEP_RE.sub("", m.group(2)), text)


def _strip_end(text: str) -> str:
    """Drop sentence punctuation, spaces and spacing commands at the end (walking an index back: linear)."""
    end = len(text)
    while True:
        new = end
        while new and text[new - 1] in " .,;~":
            new -= 1
        for command in _TRAIL_COMMANDS:
            if text.endswith(command, 0, new):
                new -= len(command)
                break
        if text.endswith("\\", 0, new) and not text.endswith("\\\\", 0, new):  # `\ ` or a lone backslash
            new -= 1
        if new == end:
            return text[:end]
        end = new


def _units(text: str) -> str:
    """Keep math-verify's unit rule from dropping anything but a unit (see the module doc)."""
    m = _TEXT_CMD_RE.search(text)
    if m is None or not text[: m.start()].strip() or not _ENDS_LIKE_UNIT_RE.search(text):
        return text
    tail = text[m.start() :]
    if len(tail) <= 200 and _UNIT_TAIL_RE.fullmatch(tail) and not _CONNECTIVE_WORD_RE.search(tail):
        return _strip_end(text[: m.start()])
    return text[: m.start()] + _TEXT_GROUP_RE.sub(lambda g: g.group(1), tail)


EMPTY_INPUT = "$$"  # what `verifier_input` gives for a text with nothing left to grade (`$ $`, `\\,`, `Answer:`, `.`)


@lru_cache(maxsize=4096)
def verifier_input(text: str) -> str:
    """The string handed to math-verify's `parse` for an extracted answer or a ground truth: one inline
    formula `$...$` (a percent sign after it). Total: never raises on a str."""
    t = text.replace("\r", " ").replace("\n", " ").replace("\t", " ")
    if not t.isascii():
        t = t.translate(_UNICODE)
    t = t.replace("**", " ").replace("\\varnothing", "\\emptyset").strip()
    t = _first_sentence(_math_pieces(t))
    t = _unbox(t).strip()
    for _ in range(2):
        t = _LEAD_PHRASE_RE.sub("", t)
        t = _LEAD_TEXT_RE.sub("", t)
    t = _strip_end(_DOLLAR_RE.sub(" ", t))  # a stray dollar (e.g. the literal `$Answer` template)
    t = _mixed_numbers(_thousands(t))
    suffix = ""
    percent = _PERCENT_RE.search(t, max(0, len(t) - 24))
    if percent and t[: percent.start()].strip():
        t, suffix = t[: percent.start()], "\\%"
    t = _strip_end(_units(t))
    return "$" + t.strip() + "$" + suffix
