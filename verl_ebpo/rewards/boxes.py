"""The one brace-matching pass over a text: every `\\boxed{...}` / `\\fbox{...}` in it, where its braces close
and which box it sits in. Answer extraction (`extract.final_boxes`) and normalisation (`normalize._unbox`)
both read boxes through `scan_boxes`; pure string code.

Braces are LaTeX's: an escaped character (`\\{`, `\\}`, `\\\\`, ...) does not count. A box is `\\boxed`,
`\\fbox` or one that lost its backslash (`\\beginboxed{...}`), then optional spacing, then `{`. The scan is one
forward pass with a stack, linear in the length of the text whatever the nesting: thousands of nested
`\\boxed{` or of braces that never close cost one pass, not one pass per box.
"""

from __future__ import annotations

import re
from typing import NamedTuple, Optional

# The braces, and the escapes that hide a brace or a backslash (`\{`, `\}`, `\\`). Any other backslash hides
# nothing that matters here: `\frac{` opens a brace, `\boxed{` opens a box.
_TOKEN_RE = re.compile(r"[{}]|\\[\\{}]")
_OPENER_AT_RE = re.compile(r"(?:boxed|fbox)\s*\{")


class Box(NamedTuple):
    start: int  # the command's first character: its backslash, or its `b`/`f` when the backslash is missing
    content_start: int  # just after the `{`
    end: Optional[int]  # index of the matching `}`; None when the braces never close
    parent: int  # index (in `scan_boxes`' list) of the innermost box whose braces are open here; -1 if none
    backslash: bool  # `\boxed{` / `\fbox{` (as opposed to `boxed{` without its backslash)


def _openers(s: str) -> dict[int, int]:
    """{index of the opening `{`: index of `boxed`/`fbox`} of every box opener. A `{` right after a command
    name or spacing is never escaped, so each of these is a brace of the scan. `str.find` per name: each
    character is looked at a bounded number of times."""
    found: dict[int, int] = {}
    for name in ("boxed", "fbox"):
        i = s.find(name)
        while i >= 0:
            m = _OPENER_AT_RE.match(s, i)
            if m is not None:
                found[m.end() - 1] = i
            i = s.find(name, i + len(name))
    return found


def scan_boxes(s: str) -> list[Box]:
    """Every box opener in `s`, in order of position, with its matching brace and its enclosing box.

    One forward pass over the braces from the first opener on, with a stack of the open braces. Linear in
    len(s)."""
    openers = _openers(s)
    if not openers:
        return []
    boxes: list[list] = []  # [start, content_start, end, parent, backslash], made Boxes at the end
    stack: list[int] = []  # per open `{`: the index of its box, or -1 for a plain brace
    open_boxes: list[int] = []  # the boxes among them, innermost last
    for m in _TOKEN_RE.finditer(s, min(openers)):
        token = m.group()
        if token == "{":
            at = m.start()
            name = openers.get(at)
            if name is None:
                stack.append(-1)
                continue
            backslash = name > 0 and s[name - 1] == "\\"
            index = len(boxes)
            start = name - 1 if backslash else name
            boxes.append([start, at + 1, None, open_boxes[-1] if open_boxes else -1, backslash])
            stack.append(index)
            open_boxes.append(index)
        elif token == "}":
            if stack and stack.pop() >= 0:
                boxes[open_boxes.pop()][2] = m.start()
        # else an escaped brace or backslash: does not count
    return [Box(*box) for box in boxes]
