"""Regression cases for the math reward: (model output, ground truth, is it correct), by answer form.

Written for this project. Each group names the public repository and path whose grader tests it was drawn
from (the idea of the case; the wording, the labels and the answer forms are ours). Labels are what a careful
human grader says, not what any one grader returns; where the sources disagree the group says so.

Two kinds of entries:

- `PAIRS`: (ground truth, answer, label, tag). Each pair is rendered in three forms after a short piece of
  reasoning: `... $\\boxed{ANSWER}$.` (form "boxed"), a last line `Answer: ANSWER` and a last line
  `Answer: $ANSWER$` (form "answer_line"; the `$` variant is skipped when the answer has a `$`). A grader
  that treats the forms alike gives the three the same verdict.
- `WHOLE`: complete outputs (form "boxed", "multi_box", "answer_line" or "none"), for what depends on the
  whole text: several boxes, intermediate boxes, prose around the answer, the DAPO `Answer:` line.

Tags: "hedged" (several alternatives offered), "prefix" (a wrong answer that starts like the right one:
`4\\sqrt{2}` for 4), "thousands" (digit-group separators), "" otherwise.

`cases()` returns every case as a dict: id, form, tag, solution, ground_truth, label, source.
"""

from __future__ import annotations

MV = "huggingface/Math-Verify"
HENDRYCKS = "hendrycks/math modeling/math_equivalence_test.py"
INSPECT_JSON = "UKGovernmentBEIS/inspect_ai tests/scorer/math_cases.json"
INSPECT_PY = "UKGovernmentBEIS/inspect_ai tests/scorer/test_math.py"
AREAL = "inclusionAI/AReaL tests/test_math_verify_reward.py"
SKYRL = "NovaSky-AI/SkyRL skyrl-gym/tests/test_aime.py"
VERL = "volcengine/verl tests/utils/reward_score/test_numeric_canonicalization_on_cpu.py"
QWEN = "QwenLM/Qwen2.5-Math evaluation/grader.py (_test_math_equal)"
ISSUE = "verl_ebpo issue 10 (this project; the forms it lists)"

# (source, [(ground truth, answer, label, tag)])
PAIRS: list[tuple[str, list[tuple[str, str, bool, str]]]] = [
    (f"{MV} tests/test_all.py::test_number_extraction", [
        ("-5", "-5", True, ""),
        ("7425000", "7,425,000", True, "thousands"),
        ("1000", "1 000", True, "thousands"),
        ("1000", "1000.0", True, ""),
        ("1000.0", "1,000.0", True, "thousands"),
        ("0.4", ".4", True, ""),
        ("1000.99", "1,000.99", True, "thousands"),
        ("1000.99", r"\$1,000.99", True, "thousands"),
        ("2", r"\text{AZYUK2A}", False, ""),
        ("1000", "1001", False, ""),
    ]),
    (f"{MV} tests/test_all.py::test_simple_fraction_notation", [
        ("10/9", r"\frac{10}{9}", True, ""),
        ("-10/9", r"-\frac{10}{9}", True, ""),
        ("10/9", r"\frac{9}{10}", False, ""),
    ]),
    (f"{MV} tests/test_all.py::test_sets_handling", [
        ("[0,1)", "[0,1)", True, ""),
        ("[0,9)", "[0,1)", False, ""),
        ("(0,9)", "[0,9)", False, ""),
        ("1", "-[0,1)", False, ""),
    ]),
    (f"{MV} tests/test_all.py::test_latex_notation", [
        ("1/3", r"\frac13", True, ""),
        ("1", r"\frac3{3}", True, ""),
        (r"\sqrt{3}", r"\sqrt3", True, ""),
        ("1/3", r"\cfrac{1}{3}", True, ""),
        ("1/3", r"\dfrac{1}{3}", True, ""),
        ("1/3", r"\tfrac{1}{3}", True, ""),
        ("1/3", "1/3", True, ""),
        ("1/3", r"\left( \frac{1}{3} \right)", True, ""),
        ("1/3", r"\frac{1}{3} \text{meters}", True, ""),
        ("1/3", r"\frac{1}{3} \textbf{meters}", True, ""),
        ("1/3", r"k = \frac{1}{3}", True, ""),
        ("10", "(9+1)", True, ""),
        ("1/3", r"\frac{1}{4}", False, ""),
    ]),
    (f"{MV} tests/test_all.py::test_percent_notation", [
        (r"28\%", "28", True, ""),
        (r"28\%", r"28\%", True, ""),
        (r"28\%", "28 percent", True, ""),
        ("0.28", "28", False, ""),
        ("28/100", "28", False, ""),
        ("28", "28/100", False, ""),
        (r"\frac{28}{100}", "28", False, ""),
        (r"28\%", "29", False, ""),
    ]),
    (f"{MV} tests/test_all.py::test_relations_math", [
        (r"x \geq 5", r"x \geq 5", True, ""),
        ("x >= 5", r"x \geq 5", True, ""),
        ("x < 3", r"x \lt 3", True, ""),
        (r"x \leq 2", "x <= 2", True, ""),
        ("x > 5", "x < 5", False, ""),
        (r"x \geq 5", r"x \leq 5", False, ""),
        (r"x \leq 5", r"5 \geq x", True, ""),
        ("x < 1", "-x > -1", True, ""),
        ("x < 1", "x > -1", False, ""),
        ("11", "x=11", True, ""),
        ("k=1", "1", True, ""),
        ("1", "k=1", True, ""),
        ("2x + z = 1", "1", False, ""),
        ("a +3z = 0", "0", False, ""),
        ("2x+4y-3=0", r"y=-\frac{1}{2}x+\frac{3}{4}", True, ""),
        ("x^2/4 + y^2/3 = 1", "x^2/16 + y^2/12 = 1/4", True, ""),
    ]),
    (f"{MV} tests/test_all.py::test_matrix_extraction", [
        (r"\begin{pmatrix}1 & 0 \\ 0 & 1\end{pmatrix}", r"\begin{pmatrix}1 & 0 \\ 0 & 1\end{pmatrix}", True, ""),
        (r"\begin{bmatrix}0 & 0 \\0 & 0\end{bmatrix}", r"\begin{pmatrix}0 & 0 \\0 & 0\end{pmatrix}", True, ""),
        (r"\begin{pmatrix}1 & 2 \\ 3 & 4\end{pmatrix}", r"\begin{pmatrix}1 & 2 \\ 3 & 5\end{pmatrix}", False, ""),
        (r"\begin{pmatrix}\frac{1}{2} & \frac{3}{4} \\ \frac{5}{6} & \frac{7}{8}\end{pmatrix}",
         r"\begin{pmatrix}\frac{1}{2} & \frac{3}{4} \\ \frac{5}{6} & \frac{7}{8}\end{pmatrix}", True, ""),
    ]),
    (f"{MV} tests/test_all.py::test_complex_math_expressions (Qwen parser tests); {QWEN}", [
        (r"\frac{1}{12}", "0.0833333333333333", True, ""),
        (r"(1,\frac{9}{2})", "(1,4.5)", True, ""),
        (r"\frac{x+2}{7}", r"\frac{x}{7}+\frac{2}{7}", True, ""),
        (r"\tan^2(y)+1", r"\sec^2(y)", True, ""),
        ("34x+45y-20z+100=0", "-34x-45y+20z-100=0", True, ""),
        (r"\frac{\sqrt{\sqrt{11}+\sqrt{194}}}{15+2\sqrt{33}}", r"\frac{\sqrt{\sqrt{11}+\sqrt{194}}}{2\sqrt{33}+15}",
         True, ""),
        ("(a+5)(b+2)", "(+5)(b+2)", False, ""),
        ("2", r"\frac{1+\sqrt{5}}{2}", False, ""),
        ("4", r"\frac{34}{16}+\frac{\sqrt{1358}}{16}", False, ""),
        (r"1\sqrt{19}", "1", False, ""),
        ("x+2n+1", "x+1", False, ""),
    ]),
    (f"{MV} tests/test_all.py::test_latex_notation_math", [
        ("2-2p", "2-2p", True, ""),
        (r"3\sqrt{13}", r"\sqrt{117}", True, ""),
        (r"90^\circ", r"90^\circ", True, ""),
        ("-2,1", "-2,1", True, ""),
        (r"1 \pm \sqrt{19}", r"1 \pm \sqrt{19}", True, ""),
        (r"3 \pm 2 \sqrt{2}", r"3 \pm 2 \sqrt{2}", True, ""),
        (r"\{1\pm\sqrt{5},-2\}", r"\{1\pm\sqrt{5},-2\}", True, ""),
        (r"2 \sin b \cos a", r"2 \sin b \cos a", True, ""),
        (r"\frac{\pi r}{h+r}", r"\frac{\pi r}{h+r}", True, ""),
        ("125", r"125\textnormal{ miles}", True, ""),
        (r"[-1, -\frac{1}{2}) \cup (-\frac{1}{2}, 0) \cup (0, 1) \cup (1, \infty)",
         r"[-1, -\tfrac12) \cup (-\tfrac12, 0) \cup (0, 1) \cup (1, \infty)", True, ""),
        (r"\sqrt{2}+\sqrt{5}", r"\sqrt 2+\sqrt 5", True, ""),
        (r"\frac{9}{4}\pi", r"\frac94\pi", True, ""),
        (r"\text{Evelyn}", r"\text{Evelyn}", True, ""),
        ("204_5", "204_5", True, ""),
        ("(6,31,-1)", "(6,31,-1)", True, ""),
        ("15", r"15\mbox{ cm}^2", True, ""),
        (r"\frac{14}{3}", r"\frac{14}{3}", True, ""),
        ("0", "0", True, ""),
    ]),
    (f"{MV} tests/test_all.py::test_math_extraction_additional_cases, test_sqrt_precision (issue 41)", [
        (r"\text{C}", r"\text{(C)}", True, ""),
        ("11111111100", r"11,\! 111,\! 111,\! 100", True, "thousands"),
        ("32349", r"32,\! 349", True, "thousands"),
        (r"(2, 12) \cup (12, 102)", r"(2,12) \cup (12,102)", True, ""),
        (r"\text{E}", "E", True, ""),
        (r"x \in [-2,7]", "[-2,7]", True, ""),
        ("4", r"4\sqrt{2}", False, "prefix"),
        ("(3,1)", "(1,3)", False, ""),
    ]),
    (f"{MV} tests/test_numina_cases.py", [
        ("(p,q)=(3,2)", "(3,2)", True, ""),
        ("(p,q,r)=(3,2,7)", "(3,2,7)", True, ""),
        ("-12;-11;-10;-8;-7;-6", r"\{-12, -11, -10, -8, -7, -6\}", True, ""),
        ("(11,7)or(7,11)", r"(7,11),\ (11,7)", True, ""),
        (r"\frac{NO}{BO}=\frac{1}{\sqrt{6}}", r"\frac{1}{\sqrt{6}}", True, ""),
        (r"\text{odd}", "odd", True, ""),
        (r"\text{Even}", "Even", True, ""),
        ("d", r"\text{E}", False, ""),
        (r"x = -5,\ p = \frac{14}{3}", r"-5, \frac{14}{3}", True, ""),
        (r"a=4,\,-8,\,-10", "-10,-8,4", True, ""),
        ("0<f(x)<1", "(0,1)", True, ""),
        (r"6 \text{ and } 8", "6,8", True, ""),
        ("(37,3,3,13),(17,3,3,7),(3,37,3,13),(3,17,3,7),(3,3,2,3)",
         "(3, 37, 3, 13), (3, 17, 3, 7), (3, 3, 2, 3), (3,17,3,7), (17,3,3,7), (37,3,3,13)", True, ""),
        ("(37,3,3),(17,3,3,7),(3,37,3,13),(3,17,3,7),(3,3,2,3)",
         "(3, 37, 3, 13), (3, 17, 3, 7), (3, 3, 2, 3), (3,17,3,7), (17,3,3,7), (37,3,3,13)", False, ""),
    ]),
    (f"{MV} tests/test_string_extraction.py, tests/test_open_thoughts.py", [
        ("D = (0, 1)", "D = (0, 1.5)", False, ""),
        ("19, 46, and 82", r"19, 46, \text{ and } 82", True, ""),
        ("19, 46, and 82", "21, 36, and 82", False, ""),
        (r"\pm 2021", "2021", False, "hedged"),
        (r"\pm 2021", "{-2021, 2021}", True, ""),
        ("12:00", "1:00", False, ""),
        ("-793 < a < 10", "(-793, 10)", True, ""),
        ("(2, 2), (1, 3), (3, 3)", "(2, 2), (1, 3), (3, 3)", True, ""),
        (r"(1, +\infty)", r"(1, +\infty)", True, ""),
        (r"0.06 \text{ yuan}", r"0.06 \text{ yuan}", True, ""),
        (r"k \ge 2", r"k \ge 2", True, ""),
        ("667", "667", True, ""),
    ]),
    (HENDRYCKS, [
        (r"\tfrac{1}{2} + \frac1{72}", r"\frac{1}{2} + 2/3", False, ""),
        ("10, 4, 2", "4, 12, 2", False, ""),
        (r"\tfrac{1}{2} +\! \frac1{72}", r"\dfrac{1}{2} +\frac{1}{72}", True, ""),
        (r"10\text{ units}", "10", True, ""),
        (r"10\text{ units}", "100", False, ""),
        ("10", r"\$10", True, ""),
        (r"\left(x-2\right)\left(x+2\right)", "(x-2)(x+2)", True, ""),
        ("0.1", ".1", True, ""),
        (r"10\%", "10", True, ""),
        (r"10\sqrt{3} + \sqrt4", r"10\sqrt3 + \sqrt{4}", True, ""),
        (r"\frac34i", r"\frac{3}{4}i", True, ""),
        (r"\tfrac83", r"\frac{8}{3}", True, ""),
        ("5x - 7y + 11z + 4 = 0", "x + y - z + 2 = 0", False, ""),
        ("1/2", r"\frac{1}{2}", True, ""),
    ]),
    (INSPECT_JSON, [
        ("42", "42", True, ""),
        ("0.5", r"\frac{1}{2}", True, ""),
        ("43", "42", False, ""),
        (r"\sqrt{2}", r"\sqrt2", True, ""),
        ("0.335", r"33.5\%", True, ""),
        (r"\{3, 2, 1\}", r"\{1,2,3\}", True, ""),
        (r"\left(1, 2\right)", r"\left(1, 2\right)", True, ""),
        ("1500", r"1.5 \times 10^3", True, ""),
        ("0", "x^2 - x^2", True, ""),
        (r"\sqrt{3} - 1", r"-1 + \sqrt{3}", True, ""),
        (r"\left(3,\frac{\pi}{2}\right)", r"\left( 3, \frac{\pi}{2} \right)", True, ""),
        (r"(-\infty,-8)\cup (8,\infty)", r"(-\infty,-8)\cup (8,\infty)", True, ""),
        (r"\begin{pmatrix} 1/\sqrt{2} & 1/\sqrt{2} \\ -1/\sqrt{2} & 1/\sqrt{2} \end{pmatrix}",
         r"\begin{pmatrix} 1/\sqrt{2} & 1/\sqrt{2} \\ -1/\sqrt{2} & 1/\sqrt{2} \end{pmatrix}", True, ""),
        (r"\binom{2026}{1013}", r"\binom{2026}{1013}", True, ""),
        ("3^{2025}", "2^{2025}", False, ""),
        ("10", r"10\text{ cm}", True, ""),
        ("15000", r"\$15,\!000", True, "thousands"),
        ("2=x", "x=2", True, ""),
        ("2>x", "x<2", True, ""),
        (r"74^\circ", r"\;\angle APC = 74^\circ\;", True, ""),
        (r"74^\circ", "74°", True, ""),
    ]),
    (INSPECT_PY, [
        ("1234", r"1\,234", True, "thousands"),
        ("12345678", r"12\,345\,678", True, "thousands"),
        ("1234.5", r"1\,234.5", True, "thousands"),
        ("1234", "1,234", True, "thousands"),
        ("-8192", "-8,192", True, "thousands"),
        ("1000000", "1,000,000", True, "thousands"),
        ("12345678902", "12345678901", False, ""),
        ("2", "(0, 1)", False, ""),
        ("0.005", r"\frac{1}{2}\%", True, ""),
        ("0.335", "33.5 percent", True, ""),
        ("2", "y = 2", True, ""),
        ("x=2", "2", True, ""),
        ("42", r"\text{forty-two}", False, ""),
    ]),
    (f"{AREAL}; {SKYRL}; {VERL}", [
        ("4", "4", True, ""),
        ("1/2", "0.5", True, ""),
        ("4", "5", False, ""),
        ("2^3", "8", True, ""),
        ("4", r"\sqrt{16}", True, ""),
        ("5/6", r"\frac{5}{6}", True, ""),
        ("-15", "-15", True, ""),
        ("3", "x = 3", True, ""),
        ("1000", "10^3", True, ""),
        (r"\frac{1}{2}", "0.5", True, ""),
        ("42", "43", False, ""),
        ("033", "33", True, ""),
        ("-0", "0", True, ""),
        ("000", "0", True, ""),
    ]),
    (f"{ISSUE}: prefix-matching wrong answers", [
        ("4", r"4\sqrt{2}", False, "prefix"),
        ("5", r"x \geq 5", False, "prefix"),
        ("2", "2^{10}", False, "prefix"),
        ("3", r"3\pi", False, "prefix"),
        ("10", "10^{-3}", False, "prefix"),
        ("2", "2x", False, "prefix"),
        ("6", r"6\sqrt{3}", False, "prefix"),
        ("4", "4^{2}", False, "prefix"),
        ("10", "10!", False, "prefix"),
        ("2", r"2 \times 10^5", False, "prefix"),
        ("3", r"3 + \sqrt{5}", False, "prefix"),
        ("5", "5i", False, "prefix"),
        ("1", r"1 - \frac{1}{e}", False, "prefix"),
        ("12", r"12\pi", False, "prefix"),
        ("7", r"7 \cdot 2", False, "prefix"),
        ("1", "1/2", False, "prefix"),
        ("4", r"4 \text{ (or possibly 3)}", False, "hedged"),
        ("4", r"4 \text{ if } n \text{ is even}, 3 \text{ otherwise}", False, "hedged"),
    ]),
    (f"{ISSUE}: hedged answers", [
        ("4", "1 or 2 or 3 or 4", False, "hedged"),
        ("4", "1, 2, 3, 4", False, "hedged"),
        ("4", r"3 \text{ or } 4", False, "hedged"),
        ("4", r"4 \text{ or } 5", False, "hedged"),
        ("4", r"\{3, 4\}", False, "hedged"),
        ("4", r"x = 3 \text{ or } x = 4", False, "hedged"),
        ("4", "3, 4, 5", False, "hedged"),
        ("4", "4; 5", False, "hedged"),
        ("4", r"4 \quad \text{or} \quad 5", False, "hedged"),
        (r"\frac{1}{2}", r"\frac{1}{2} \text{ or } \frac{1}{3}", False, "hedged"),
        ("C", "B, C", False, "hedged"),
        ("C", r"\text{(B) or (C)}", False, "hedged"),
        ("2021", r"\pm 2021", False, "hedged"),
        ("3", r"3 \text{ or } -3", False, "hedged"),
        (r"\{1,2,3,4\}", "1 or 2 or 3 or 4", True, "hedged"),
        ("1, 2", r"x = 1 \text{ or } x = 2", True, "hedged"),
        (r"\pm 3", r"3 \text{ or } -3", True, "hedged"),
        ("2, 5", "5, 2", True, "hedged"),
        ("(2,2), (6,2)", "(6,2), (2,2)", True, "hedged"),
    ]),
    (f"{ISSUE}: LaTeX answers missed on an Answer: line", [
        (r"\frac{1}{3}", r"\frac13", True, ""),
        (r"\frac{1}{3}", r"\dfrac{1}{3}", True, ""),
        (r"x \geq 5", r"x \geq 5", True, ""),
        (r"(1,\frac{9}{2})", "(1,4.5)", True, ""),
        (r"\begin{pmatrix}1\\2\end{pmatrix}", r"\begin{bmatrix}1\\2\end{bmatrix}", True, ""),
        ("E", r"\text{E}", True, ""),
        (r"\pm 2021", "{-2021, 2021}", True, ""),
        ("0.001", "10^{-3}", True, ""),
        ("1024", "2^{10}", True, ""),
        (r"4\sqrt{2}", r"\sqrt{32}", True, ""),
        (r"3\pi", r"\frac{6\pi}{2}", True, ""),
    ]),
    (f"{ISSUE}: thousands separators", [
        ("1234", r"1\,234", True, "thousands"),
        ("1000", "1 000", True, "thousands"),
        ("1000000", r"1\,000\,000", True, "thousands"),
        ("1000000", "1 000 000", True, "thousands"),
        ("12345", "12{,}345", True, "thousands"),
        ("1234567.5", r"1\,234\,567.5", True, "thousands"),
        ("1234", r"1\,235", False, "thousands"),
        ("10000", "1 000", False, "thousands"),
    ]),
    ("volcengine/verl verl/utils/reward_score/math_dapo.py (answer forms it normalises: units, $, text)", [
        ("5", r"5 \text{ cm}", True, ""),
        ("12", r"12 \text{ square units}", True, ""),
        ("8", r"8\text{ inches}", True, ""),
        ("60", r"60^\circ", True, ""),
        ("45", "45 degrees", True, ""),
        ("20", r"\$20", True, ""),
        ("5", r"5 \text{ cm}^2", True, ""),
        ("C", "(C)", True, ""),
        ("C", r"\text{(C)}", True, ""),
        ("C", r"\textbf{(C)}", True, ""),
        ("C", "D", False, ""),
        ("B", r"\text{(D)}", False, ""),
    ]),
    ("tests/test_rewards.py of this project (the table of equivalences and wrong answers), re-rendered", [
        (r"\frac{1}{2}", r"\frac{1}{3}", False, ""),
        ("(1,2]", "[1,2]", False, ""),
        ("(3,-1)", "(-1,3)", False, ""),
        (r"2\sqrt{3}", r"3\sqrt{2}", False, ""),
        ("(x+1)^2", "x^2+1", False, ""),
        (r"\frac{1}{3}", "0.33", False, ""),
        (r"\pi", "3.14", False, ""),
        ("7", "-7", False, ""),
        (r"\frac{\sqrt{3}}{2}", r"\frac{\sqrt{2}}{2}", False, ""),
        (r"(-\infty, 3)", r"(-\infty, 3]", False, ""),
        (r"\{1, 2\}", r"\{1, 3\}", False, ""),
        ("2", r"\frac{1}{2}", False, ""),
        (r"\sqrt{2}", "2", False, ""),
        ("(x+1)^2", "x^2+2x+1", True, ""),
        (r"\frac{\pi}{3}", r"\pi/3", True, ""),
        (r"2\sqrt{3}", r"\sqrt{12}", True, ""),
        (r"(-\infty,3)", r"\left(-\infty, 3\right)", True, ""),
    ]),
]

_LEADS = [
    "We set up the equation and simplify both sides carefully.",
    "Let $t = x + 1$. Then $t^2 = 9$, and we check both signs against the constraint $x > -1$.",
    "By the triangle inequality $|a+b| \\le |a| + |b|$, with equality when $a$ and $b$ have the same sign.",
    "Counting the cases one by one:\n- case 1 gives $3$ ways,\n- case 2 gives $5$ ways.\nWe combine them.",
    "Summing the geometric series $\\sum_{k=0}^{n} r^k = \\frac{1-r^{n+1}}{1-r}$ and substituting $r = \\frac12$.",
]

M500 = "MATH-500 style solutions as in " + MV + " tests/test_all.py::test_latex_notation_math"
OT = f"{MV} tests/test_open_thoughts.py, tests/test_numina_cases.py (multi-box answers)"

# (source, form, tag, solution, ground truth, label)
WHOLE: list[tuple[str, str, str, str, str, bool]] = [
    (M500, "boxed", "", r"Since $x<2$, it follows that $|x-2|=2-x$. If $2-x=p$, then $x=2-p$. Thus $x-p=\boxed{2-2p}$.",
     "2-2p", True),
    (M500, "boxed", "", r"Of the two-digit perfect squares, only $4^2=16$ and $6^2=36$ end in $6$. Thus, there are "
     r"$\boxed{2}$ distinct possible values for $B$.", "2", True),
    (M500, "boxed", "", r"Therefore, $\boxed{14{,}916}$ is our answer.", "14916", True),
    (M500, "boxed", "", r"making for a total loss of $\boxed{28\%}$.", r"28\%", True),
    (M500, "boxed", "", r"the polar coordinates are $\boxed{\left( 3, \frac{\pi}{2} \right)}.$", r"(3, \frac{\pi}{2})",
     True),
    (M500, "boxed", "", r"Hence the degree of $p(x)$ is $\boxed{0}.$", "0", True),
    (M500, "boxed", "", r"By the quadratic formula, $x = \boxed{1 \pm \sqrt{19}}.$", r"1 \pm \sqrt{19}", True),
    (M500, "boxed", "", r"the only integer roots are $\boxed{-2,1}.$", "-2,1", True),
    (M500, "boxed", "hedged", r"the only integer roots are $\boxed{-2,1}.$", "1", False),
    (M500, "boxed", "", r"The distance is $\boxed{125\textnormal{ miles}}.$", "125", True),
    (M500, "boxed", "", r"$\boxed{\text{Evelyn}}$ is our answer.", r"\text{Evelyn}", True),
    (M500, "boxed", "", r"Therefore, \begin{align*} \angle BAC &= 50^\circ+40^\circ \\ &= \boxed{90^\circ}. \end{align*}",
     r"90^\circ", True),
    (M500, "boxed", "", r"\boxed{\begin{pmatrix} 0 & 3 \\ 0 & -1 \end{pmatrix}}", r"\begin{pmatrix} 0 & 3 \\ 0 & -1 \end{pmatrix}",
     True),
    (f"{MV} tests/test_boxed.py", "boxed", "", "the answer should be \\boxed{004}.\n\nBut let me check again: the remainder "
     "is 004. So, \\boxed{004} is the correct answer.\n\n**Final Answer**\n\\boxed{004}", "4", True),
    (f"{MV} tests/test_boxed.py", "boxed", "", "could answer therefore\\boxed{840}.,but let me put this after "
     "explain.\n\n**Final Answer**\n\\boxed{840}", "840", True),
    (OT, "multi_box", "", r"$$\boxed{(2, 2)} \quad \text{and} \quad \boxed{(6, 2)}$$", "(2, 2), (6, 2)", True),
    (OT, "multi_box", "", r"the solutions are \boxed{(2,2)} and \boxed{(6,2)}.", "(2,2), (6,2)", True),
    (OT, "multi_box", "hedged", r"the solutions are \boxed{(2,2)} and \boxed{(6,2)}.", "(6,2)", False),
    (OT, "multi_box", "", r"$$\boxed{(98, 2)} \quad \text{and} \quad \boxed{(99, 503)}$$", "(98, 2), (99, 503)", True),
    (OT, "multi_box", "", r"$$\boxed{k = 45} \quad \text{and} \quad \boxed{n = 2}$$", "k = 45, n = 2", True),
    (OT, "multi_box", "", r"\boxed{1} and \boxed{2} and \boxed{3}", r"\{1,2,3\}", True),
    (OT, "multi_box", "", r"\boxed{1},\boxed{2},\boxed{3}", "1,2,3", True),
    (OT, "multi_box", "", "solutions are:\n\n\\[\n\\boxed{(1, 2)}, \\boxed{(2, 1)}, \\boxed{(-1, -20)}, "
     "\\boxed{(-20, -1)}\n\\]", "(2,1),(1,2),(-1,-20),(-20,-1)", True),
    (OT, "multi_box", "", r"The roots are \(\boxed{1}\) and \(\boxed{-2}\).", "-2, 1", True),
    (OT, "multi_box", "", r"$\boxed{\dfrac{108 + 31\sqrt{5}}{216}} \quad \text{and} \quad \boxed{\dfrac{108 - 31\sqrt{5}}{216}}$",
     r"\frac{1}{2}+\frac{31\sqrt{5}}{216}, \frac{1}{2}-\frac{31\sqrt{5}}{216}", True),
    (OT, "multi_box", "hedged", r"So $x = \boxed{3}$ or $x = \boxed{4}$.", "4", False),
    (OT, "multi_box", "hedged", r"\boxed{3} or \boxed{4}", "4", False),
    (OT, "multi_box", "hedged", r"The answer is \boxed{2}, \boxed{3}.", "3", False),
    (OT, "multi_box", "", r"The answer is \boxed{2}, \boxed{3}.", r"\{2, 3\}", True),
    (f"{INSPECT_PY} (test_math_scorer_uses_last_boxed_answer)", "boxed", "", r"\boxed{10} and then \boxed{42}", "42", True),
    (f"{INSPECT_PY} (test_math_scorer_uses_last_boxed_answer)", "boxed", "", r"\boxed{10} and then \boxed{42}",
     r"\{10,42\}", False),
    (f"{ISSUE}: intermediate boxes", "boxed", "", r"We get \boxed{3} for the first part. Then the total is \boxed{7}.",
     "7", True),
    (f"{ISSUE}: intermediate boxes", "boxed", "", r"We get \boxed{3} for the first part. Then the total is \boxed{7}.",
     "3", False),
    (f"{ISSUE}: intermediate boxes", "boxed", "", "So $a = \\boxed{4}$. Checking again, the answer is \\boxed{5}.", "5", True),
    (f"{ISSUE}: intermediate boxes", "boxed", "", "Thus \\boxed{12}.\n\n**Final Answer**\n\\boxed{12}", "12", True),
    (f"{ISSUE}: intermediate boxes", "boxed", "", "first \\boxed{3}, no wait: \\boxed{5}", "5", True),
    (f"{ISSUE}: answer lines", "answer_line", "", "Final Answer: The final answer is $28 \\%$. I hope it is correct.",
     r"28\%", True),
    (f"{ISSUE}: answer lines", "answer_line", "", "We add.\nAnswer: The answer is $5$.", "5", True),
    (f"{ISSUE}: answer lines", "answer_line", "", "We solve.\nAnswer: $x = 3$ or $x = 4$", "3, 4", True),
    (f"{ISSUE}: answer lines", "answer_line", "hedged", "We solve.\nAnswer: $x = 3$ or $x = 4$", "4", False),
    (f"{ISSUE}: answer lines", "answer_line", "hedged", "We solve.\nAnswer: $4$, or possibly $3$", "4", False),
    (f"{ISSUE}: answer lines", "answer_line", "hedged", "We solve.\nAnswer: $4$, or possibly $3$", "3", False),
    (f"{ISSUE}: answer lines", "answer_line", "hedged", "We solve.\nAnswer: 4 (or maybe 3)", "4", False),
    (f"{ISSUE}: answer lines", "answer_line", "", "We count.\n**Answer:** 12", "12", True),
    (f"{ISSUE}: answer lines", "answer_line", "", "We count.\nAnswer: $42", "42", True),
    (f"{ISSUE}: answer lines", "answer_line", "", "We count.\nAnswer: 42.", "42", True),
    (f"{ISSUE}: answer lines", "answer_line", "", "We count.\nAnswer: **42**", "42", True),
    (f"{ISSUE}: answer lines", "answer_line", "", "We divide.\nAnswer:\n$\\frac{3}{4}$", "0.75", True),
    (f"{ISSUE}: answer lines", "answer_line", "", "We divide.\nAnswer: \\(\\frac{3}{4}\\)", "0.75", True),
    (f"{ISSUE}: answer lines", "answer_line", "", "The first part is \\boxed{3}.\nAnswer: 5", "5", True),
    (f"{ISSUE}: answer lines", "answer_line", "", "The first part is \\boxed{3}.\nAnswer: 5", "3", False),
    (f"{ISSUE}: answer lines", "boxed", "", "Answer: 5\n\nLet me double-check: $\\boxed{5}$", "5", True),
    (f"{ISSUE}: answer lines", "boxed", "", "\\boxed{5}\n\nTo double-check the answer: substitute 6 back.", "5", True),
    (f"{ISSUE}: answer lines", "answer_line", "prefix", "Reasoning " * 80 + "\nAnswer: 4\\sqrt{2}", "4", False),
    (f"{ISSUE}: answer lines", "answer_line", "prefix", "We bound it.\nAnswer: x \\geq 5", "5", False),
    (f"{ISSUE}: answer lines", "answer_line", "", "We bound it.\nAnswer: $x \\geq 5$", "x \\ge 5", True),
    (f"{ISSUE}: answer lines", "answer_line", "thousands", "We multiply.\nAnswer: 1\\,234", "1234", True),
    (f"{ISSUE}: answer lines", "answer_line", "thousands", "We multiply.\nAnswer: 1 000", "1000", True),
    (f"{ISSUE}: answer lines", "answer_line", "", "We multiply.\nAnswer: 20%", "20", True),
    (f"{ISSUE}: answer lines", "answer_line", "", "We multiply.\nAnswer: 74°", "74", True),
    (f"{INSPECT_PY} (no readable answer)", "none", "", "I think it is five.", "5", False),
    (f"{INSPECT_PY} (no readable answer)", "none", "", "", "42", False),
    (f"{AREAL} (prose without a final-answer marker)", "none", "", "The answer is 4", "4", False),
]


def _render(index: int, answer: str, form: str) -> str:
    lead = _LEADS[index % len(_LEADS)]
    if form == "boxed":
        return f"{lead}\nTherefore, the final answer is $\\boxed{{{answer}}}$."
    if form == "answer_line":
        return f"{lead}\nAnswer: {answer}"
    return f"{lead}\nAnswer: ${answer}$"  # "answer_line_dollar"


def cases() -> list[dict]:
    out = []
    n = 0
    for source, pairs in PAIRS:
        for gold, answer, label, tag in pairs:
            for form in ("boxed", "answer_line", "answer_line_dollar"):
                if form == "answer_line_dollar" and "$" in answer:
                    continue
                out.append({
                    "id": f"p{n:03d}-{form}",
                    "form": "answer_line" if form.startswith("answer_line") else form,
                    "tag": tag,
                    "solution": _render(n, answer, form),
                    "ground_truth": gold,
                    "label": label,
                    "source": source,
                    "pair": n,
                })
            n += 1
    for i, (source, form, tag, solution, gold, label) in enumerate(WHOLE):
        out.append({"id": f"w{i:03d}-{form}", "form": form, "tag": tag, "solution": solution, "ground_truth": gold,
                    "label": label, "source": source, "pair": None})
    return out
