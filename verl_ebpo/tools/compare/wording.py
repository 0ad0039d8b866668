"""How reports state verdicts: the 80%-power explanation once per report, not in every "not resolved" sentence.

`stats.verdict` writes each "not resolved" verdict with its own copy of the explanation ("...; these seeds would
resolve a true difference of ±0.146 with 80% power, so a smaller effect is not excluded."). A report of many
verdicts repeats it on every line. `short(verdict)` keeps the number and drops the explanation
("... 3 seeds; resolvable at 80% power: ±0.146)"), and `power_note(verdicts)` is the one line a report prints
once, beside them, when any verdict was shortened. A sentence of another form is returned unchanged.
"""

from __future__ import annotations

import re
from typing import Iterable

_POWER = re.compile(r"\); these seeds would resolve a true difference of (±\S+) with (\d+(?:\.\d+)?)% power, so a "
                    r"smaller effect is not excluded\.$")


def short(verdict: str) -> str:
    """`verdict` without the power explanation (the resolvable difference kept inside the parentheses)."""
    return _POWER.sub(r"; resolvable at \2% power: \1).", verdict)


def power_note(verdicts: Iterable[str]) -> str | None:
    """The explanation, once, for the verdicts `short` shortened (None when none was)."""
    levels = sorted({m.group(2) for v in verdicts for m in [_POWER.search(v)] if m})
    if not levels:
        return None
    level = "/".join(levels)
    return (f"\"Not resolved\": the 95% interval covers 0. \"Resolvable at {level}% power: ±d\": a true difference of "
            f"d or more would give an interval excluding 0 in {level}% of repetitions with these seeds; a smaller "
            "effect is not excluded.")
