"""The math reward against the regression cases (tests/reward_cases/cases.py: drawn from public graders'
tests, each citing its source), and the property that an answer gets the same verdict boxed or on an
`Answer:` line. These run the real verifier processes (math-verify)."""

import importlib.util
import os
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from verl_ebpo.rewards import compute_score, shutdown
from verl_ebpo.rewards.extract import extract_answer
from verl_ebpo.rewards.normalize import verifier_input

HERE = os.path.dirname(os.path.abspath(__file__))


def _load_cases():
    spec = importlib.util.spec_from_file_location("reward_cases", os.path.join(HERE, "reward_cases", "cases.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.cases()


CASES = _load_cases()


@pytest.fixture(scope="module")
def results():
    def one(case):
        return compute_score("regression", case["solution"], case["ground_truth"], processes=2)

    with ThreadPoolExecutor(4) as pool:
        out = dict(zip([c["id"] for c in CASES], pool.map(one, CASES)))
    yield out
    shutdown()


def test_the_case_set_is_large_and_cited():
    assert len(CASES) >= 800
    assert len({c["id"] for c in CASES}) == len(CASES)
    forms = {c["form"] for c in CASES}
    assert {"boxed", "answer_line", "multi_box", "none"} <= forms
    assert sum(c["tag"] == "hedged" for c in CASES) >= 50 and sum(c["tag"] == "prefix" for c in CASES) >= 40
    for c in CASES:
        assert c["source"] and ("/" in c["source"] or "issue" in c["source"]), c["id"]
        assert c["label"] in (True, False)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_case(results, case):
    out = results[case["id"]]
    assert out["acc"] is case["label"], (case["ground_truth"], case["solution"][-200:], out)


def test_hedged_and_prefix_wrong_answers_are_never_accepted(results):
    accepted = [c["id"] for c in CASES if c["tag"] in ("hedged", "prefix") and not c["label"] and results[c["id"]]["acc"]]
    assert accepted == []


def test_the_three_forms_of_a_pair_agree(results):
    """`\\boxed{A}`, `Answer: A` and `Answer: $A$` of one answer get one verdict."""
    by_pair = defaultdict(set)
    for c in CASES:
        if c["pair"] is not None:
            by_pair[c["pair"]].add(results[c["id"]]["verdict"])
    split = {p: v for p, v in by_pair.items() if len(v) > 1}
    assert split == {}


# --- the same verdict for the boxed and the Answer: form of generated answers -------------------------------

_int = st.integers(-50, 2500).map(str)
_small = st.integers(1, 30).map(str)
_atom = st.one_of(
    _int,
    st.builds(lambda a, b: f"\\frac{{{a}}}{{{b}}}", _small, _small),
    st.builds(lambda a, b: f"{a}/{b}", _small, _small),
    st.builds(lambda a, b: f"{a}\\sqrt{{{b}}}", _small, st.sampled_from("2357")),
    st.builds(lambda a: f"{a}\\pi", _small),
    st.builds(lambda a, b: f"{a}^{{{b}}}", _small, st.integers(-3, 4).map(str)),
    st.builds(lambda a: f"{a}.5", _int),
    st.builds(lambda a, b: f"{a}\\,{b:03d}", st.integers(1, 999), st.integers(0, 999)),
    st.builds(lambda a, b: f"{a} {b:03d}", st.integers(1, 999), st.integers(0, 999)),
    st.builds(lambda a, b, c: f"{a}\\frac{{{b}}}{{{c}}}", _small, st.integers(1, 4).map(str), st.integers(5, 9).map(str)),
    st.sampled_from(["A", "B", "\\text{(C)}", "(D)", "\\text{E}", "x", "e", "\\infty"]),
)
_answer = st.one_of(
    _atom,
    st.builds(lambda a: f"x = {a}", _atom),
    st.builds(lambda a, r: f"x {r} {a}", _atom, st.sampled_from(["\\geq", "<", "\\le", ">"])),
    st.builds(lambda a, b: f"{a} or {b}", _atom, _atom),
    st.builds(lambda a, b: f"{a}, {b}", _atom, _atom),
    st.builds(lambda a, b: f"{a} \\text{{ or }} {b}", _atom, _atom),
    st.builds(lambda a, b: f"({a}, {b})", _atom, _atom),
    st.builds(lambda a, b: f"[{a}, {b})", _int, _int),
    st.builds(lambda a, b: f"\\{{{a}, {b}\\}}", _atom, _atom),
    st.builds(lambda a: f"\\pm {a}", _atom),
    st.builds(lambda a: f"{a}\\%", _int),
    st.builds(lambda a, u: f"{a} \\text{{ {u}}}", _int, st.sampled_from(["cm", "units", "ways", "(or 3)", "if n even"])),
    st.builds(lambda a: f"{a}.", _atom),
)


@settings(max_examples=300, deadline=None)
@given(answer=_answer)
def test_boxed_and_answer_line_read_the_same_text(answer):
    """Pure part of the property: the extracted text, and what math-verify is given, are the same."""
    boxed = extract_answer(f"We work it out.\nSo the answer is $\\boxed{{{answer}}}$.")
    line = extract_answer(f"We work it out.\nAnswer: {answer}")
    dollar = extract_answer(f"We work it out.\nAnswer: ${answer}$")
    assert boxed == line == answer.strip()
    assert verifier_input(boxed) == verifier_input(line) == verifier_input(dollar)


@pytest.fixture(scope="module")
def pool_for_properties():
    yield
    shutdown()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(answer=_answer, gold=st.one_of(_answer, _atom), same=st.booleans())
def test_boxed_and_answer_line_get_the_same_verdict(pool_for_properties, answer, gold, same):
    gold = answer if same else gold
    verdicts = {
        compute_score("p", f"We work it out.\nSo the answer is $\\boxed{{{answer}}}$.", gold)["verdict"],
        compute_score("p", f"We work it out.\nAnswer: {answer}", gold)["verdict"],
        compute_score("p", f"We work it out.\nAnswer: ${answer}$", gold)["verdict"],
    }
    assert len(verdicts) == 1, (answer, gold, verdicts)
    if same:
        assert verdicts == {"correct"}


def test_accuracy_benchmark_table(results):
    """benchmarks/bench_reward.py --accuracy table, on these results: every form at 100%."""
    import runpy

    bench = runpy.run_path(os.path.join(os.path.dirname(HERE), "benchmarks", "bench_reward.py"))
    rows = [{**c, "got": bool(results[c["id"]]["acc"])} for c in CASES]
    text = bench["table"](rows)
    lines = [line for line in text.splitlines() if line.startswith("| ") and "%" in line]
    assert [line.split("|")[1].strip() for line in lines] == [
        "boxed", "answer_line", "multi_box", "none", "tag: hedged", "tag: prefix", "tag: thousands", "**all**"]
    assert all("| 100.0% | 0 | 0 |" in line for line in lines), text
