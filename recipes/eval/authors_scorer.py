"""The authors' answer checking (PROTOCOL=authors / EVAL_PROTOCOL=authors): a string match of the answer on
the last `Answer:` line against the ground truth, both normalised by the rules of the Minerva paper
(Lewkowycz et al. 2022, "Solving Quantitative Reasoning Problems with Language Models", App. D.1).

Written for this project from the description of the authors' code (GitHub Tonyzhou98/verl, commit
75b014702650312cb1e7c3537183d7df6dc5a81f: recipe/ebpo/ebpo_eval.py, and the `math_dapo` reward of the verl
their scripts ran); tests/test_recipes_eval.py checks the normalisation against verl's own
`verl.utils.reward_score.math_dapo.normalize_final_answer`.

Two entry points, both with verl's reward-function signature and result ({"score": +1 or -1, "acc",
"pred": the normalised extracted answer}):

- `compute_score`: the training (and validation) reward of PROTOCOL=authors, their verl's `math_dapo`:
  the last 300 characters of the response, the LAST `Answer:` match. verl 0.9.1's own `math_dapo` differs:
  when no `Answer:` line is found it falls back to an exact `\\boxed{}` match, which that verl did not.
- `evaluation_score`: their evaluation (`ebpo_eval.py`), which differs in three details: the response is
  stripped of surrounding whitespace first; of several `Answer:` matches in the last 300 characters the
  SECOND-TO-LAST is taken (the only one when there is one); and the normalisation also drops a trailing
  ".0" (as the Minerva rules do; their verl's `math_dapo` does not).

A response without an `Answer:` match (in that window) is wrong, with pred "[INVALID]".
"""

from __future__ import annotations

import re
from typing import Any, Callable, Optional

WINDOW = 300  # characters at the end of a response that are searched for the answer
INVALID = "[INVALID]"
ANSWER_LINE = re.compile(r"Answer\s*:\s*([^\n]+)", re.IGNORECASE)

# The Minerva normalisation, as data. Applied in this order:
# 1. keep what follows the last "="; drop a trailing ".0" (evaluation only, see above);
# 2. plain replacements (old -> new), in order;
_REPLACE = (
    ("an ", ""),
    ("a ", ""),
    (".$", "$"),
    ("\\$", ""),
    ("\\ ", ""),
    (" ", ""),
    ("mbox", "text"),
    (",\\text{and}", ","),
    ("\\text{and}", ","),
    ("\\text{m}", "\\text{}"),
)
# 3. units, words and TeX spacing that are deleted, in order;
_DELETE = (
    "square", "ways", "integers", "dollars", "mph", "inches", "hours", "km", "units", "\\ldots", "sue",
    "points", "feet", "minutes", "digits", "cents", "degrees", "cm", "gm", "pounds", "meters", "meals",
    "edges", "students", "childrentickets", "multiples",
    "\\text{s}", "\\text{.}", "\\text{\ns}", "\\text{}^2", "\\text{}^3", "\\text{\n}", "\\text{}",
    "\\mathrm{th}", "^\\circ", "^{\\circ}", "\\;", ",\\!", "{,}", '"', "\\dots",
)
# 4. TeX rewrites, in order: keep the first $...$ span of a line; unwrap \text{}, \textbf{}, \overline{}
#    (shortest), \boxed{} (longest); expand the shorthands \fracab -> \frac{a}{b} and \sqrta -> \sqrt{a};
_REWRITE = tuple(
    (re.compile(pattern), repl)
    for pattern, repl in (
        (r"(.*?)\$(.*?)\$(.*)", r"$\2$"),
        (r"\\text\{(.*?)\}", r"\1"),
        (r"\\textbf\{(.*?)\}", r"\1"),
        (r"\\overline\{(.*?)\}", r"\1"),
        (r"\\boxed\{(.*)\}", r"\1"),
        (r"frac([^{])(.)", r"frac{\1}{\2}"),
        (r"sqrt([^{])", r"sqrt{\1}"),
    )
)
# 5. delete every "$"; an integer written with thousands separators loses its commas; strip.


def normalize(answer: str, drop_trailing_zero: bool = False) -> str:
    """An answer in the Minerva normal form (see the module's tables for the rules); `drop_trailing_zero`:
    "12.0" -> "12" (their evaluation), off in their training reward."""
    text = answer.split("=")[-1]
    if drop_trailing_zero and text.endswith(".0"):
        text = text[:-2]
    for old, new in _REPLACE:
        text = text.replace(old, new)
    for junk in _DELETE:
        text = text.replace(junk, "")
    for pattern, repl in _REWRITE:
        text = pattern.sub(repl, text)
    text = text.replace("$", "")
    if text.replace(",", "").isdigit():
        text = text.replace(",", "")
    return text.strip()


def _last(matches: list) -> str:
    return matches[-1]


def _second_to_last(matches: list) -> str:
    return matches[-2] if len(matches) > 1 else matches[-1]


def extract(response: str, pick: Callable[[list], str] = _last) -> str:
    """The raw text after `Answer:` that `pick` chooses among the matches in the last WINDOW characters."""
    matches = ANSWER_LINE.findall(response[-WINDOW:])
    return pick(matches) if matches else INVALID


def judge(response: str, ground_truth: Any, pick: Callable[[list], str] = _last,
          drop_trailing_zero: bool = False) -> dict:
    """{"score": 1.0 or -1.0, "acc": bool, "pred": the normalised answer}."""
    pred = normalize(extract(response, pick), drop_trailing_zero)
    acc = pred == normalize(str(ground_truth), drop_trailing_zero)
    return {"score": 1.0 if acc else -1.0, "acc": acc, "pred": pred}


def compute_score(data_source: Optional[str] = None, solution_str: str = "", ground_truth: Any = "",
                  extra_info: Optional[dict] = None, **kwargs) -> dict:
    """Training reward of PROTOCOL=authors (their verl's `math_dapo`): the last `Answer:` match, +1/-1."""
    return judge(solution_str, ground_truth, _last)


def evaluation_score(data_source: Optional[str] = None, solution_str: str = "", ground_truth: Any = "",
                     extra_info: Optional[dict] = None, **kwargs) -> dict:
    """Their evaluation's check (ebpo_eval.py): stripped response; of several `Answer:` matches in the
    last 300 characters the second-to-last; a trailing ".0" dropped."""
    return judge(solution_str.strip(), ground_truth, _second_to_last, drop_trailing_zero=True)
