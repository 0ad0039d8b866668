"""Numbers that cannot go stale: the simulator's numbers in docs/simulator.md and the README are rendered from
results files committed under docs/results/ next to the command that made them, and a small configuration is
re-run and must reproduce its committed file.

- Every `<!-- results:NAME:KEY -->` block in the docs must equal `report.doc_blocks` (or `readme_block`) of
  docs/results/NAME/summary.json: editing a number in a block fails the test.
- The results sections of docs/simulator.md hold no other decimal number (outside code), so a number cannot be
  typed in beside the blocks.
- docs/results/simulate_small/summary.json is re-made by its own `command` and must be equal (all but the
  timings): a change to the simulator that moves a published cell fails it. (The default run takes minutes, too
  long for the suite; the small one runs every code path of the default: every regime knob, DAPO, EBPO, JS,
  the lr tuning and the gradient measurement.)
- The topic study (`--study topics`): its blocks quote docs/results/simulate_topics, its section holds no other
  number, the prose's qualitative claims hold in that file, and docs/results/simulate_topics_small is reproduced.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys

import pytest

from verl_ebpo.tools.simulate import report, topics

ROOT = os.path.join(os.path.dirname(__file__), "..")
RESULTS = os.path.join(ROOT, "docs", "results")


def _read(*parts) -> str:
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as f:
        return f.read()


def _summary(name: str) -> dict:
    return json.loads(_read("docs", "results", name, "summary.json"))


def _blocks_in(text: str, name: str) -> dict:
    """KEY -> body of every block of results NAME (a body never holds another block's start)."""
    pattern = rf"<!-- results:{re.escape(name)}:([\w-]+) -->\n((?:(?!<!-- results:).)*?)\n?<!-- /results -->"
    return dict(re.findall(pattern, text, re.S))


def test_blocks_are_rewritten_in_place_even_when_empty():
    text = ("a\n<!-- results:x:one -->\n<!-- /results -->\nb\n<!-- results:x:two -->\nold\n<!-- /results -->\nc\n")
    new = report.replace_blocks(text, {"one": "1", "two": "2"}, "x")
    assert new == "a\n<!-- results:x:one -->\n1\n<!-- /results -->\nb\n<!-- results:x:two -->\n2\n<!-- /results -->\nc\n"
    assert _blocks_in(new, "x") == {"one": "1", "two": "2"}


def test_simulator_doc_quotes_the_committed_default_results():
    text = _read("docs", "simulator.md")
    found = _blocks_in(text, "simulate_default")
    expected = report.doc_blocks(_summary("simulate_default"))
    assert set(found) == set(expected), (set(found), set(expected))
    for key, body in found.items():
        assert body == expected[key], f"docs/simulator.md block {key} differs from docs/results/simulate_default"


def test_readme_quotes_the_committed_default_results():
    found = _blocks_in(_read("README.md"), "simulate_default")
    assert found == {"readme": report.readme_block(_summary("simulate_default"))}


def test_results_sections_hold_no_number_outside_the_generated_blocks():
    text = _read("docs", "simulator.md")
    section = text[text.index("## The default sweep: results"):text.index("## Limits of the model")]
    section = re.sub(r"<!-- results:[\w:-]+ -->\n(?:(?!<!-- results:).)*?<!-- /results -->", "", section, flags=re.S)
    section = re.sub(r"```.*?```", "", section, flags=re.S)
    section = re.sub(r"`[^`]*`", "", section)
    stray = re.findall(r"[-+]?\d+\.\d+", section)
    assert not stray, f"numbers typed into docs/simulator.md's results sections: {stray[:10]}"


def test_an_edited_number_is_caught():
    """The check above is not vacuous: change one digit of a block and it no longer matches."""
    text = _read("docs", "simulator.md")
    body = _blocks_in(text, "simulate_default")["headline"]
    i = re.search(r"\d\.\d{3}", body).start() + 4
    edited = body[:i] + str((int(body[i]) + 1) % 10) + body[i + 1:]
    assert edited != report.doc_blocks(_summary("simulate_default"))["headline"]


def test_lr_edges_known_answer():
    s = {"lr_grid": [0.1, 1.0, 10.0], "regimes": {"r": {"a": {"2": {"lr": 0.1}, "4": {"lr": 1.0}},
                                                        "b": {"2": {"lr": 10.0}}}}}
    assert report.lr_edges(s) == ["r/a/2", "r/b/2"]
    assert report.lr_edges({**s, "lr_grid": [1.0]}) == []


def test_default_results_keep_their_promises():
    """The committed default run: >= 3 tuning seeds, the default estimator set, the headline comparisons with
    their gradient noise ratios, and the run sentence naming every cell whose lr is at an edge of the grid
    (docs/simulator.md says why there are such cells)."""
    s = _summary("simulate_default")
    run = report.doc_blocks(s)["run"]
    assert all(edge in run for edge in report.lr_edges(s))
    assert len(s["tune_seeds"]) >= 3
    assert set(next(iter(s["regimes"].values()))) == {"grpo", "drgrpo", "rfpp_baseline", "rloo", "dapo", "js",
                                                      "ebpo"}
    for comps in s["regime_comparisons"].values():
        for pair in report.PAIRS:
            assert all("noise_ratio" in c for c in comps[pair].values())


def _without_timings(x):
    if isinstance(x, dict):
        return {k: _without_timings(v) for k, v in x.items() if k != "seconds"}
    if isinstance(x, list):
        return [_without_timings(v) for v in x]
    return x


@pytest.mark.parametrize("name", ["simulate_small", "simulate_topics_small"])
def test_small_configuration_reproduces_its_committed_file(tmp_path, name):
    committed = _summary(name)
    argv = shlex.split(committed["command"])
    assert argv[:2] == ["verl-ebpo", "simulate"]
    # in a fresh interpreter, as a user runs it: a run must not depend on what this test process did before
    done = subprocess.run([sys.executable, "-m", "verl_ebpo.tools.cli", *argv[1:], "--out", str(tmp_path),
                           "--no-figure", "--quiet"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    fresh = json.loads((tmp_path / "summary.json").read_text())
    assert _without_timings(fresh) == _without_timings(committed)


@pytest.mark.parametrize("name", ["simulate_default", "simulate_small", "simulate_topics", "simulate_topics_small"])
def test_results_files_name_their_command(name):
    s = _summary(name)
    assert s["command"].startswith("verl-ebpo simulate")
    assert os.path.exists(os.path.join(RESULTS, name, "results.md"))


def test_simulator_doc_quotes_the_committed_topic_study():
    found = _blocks_in(_read("docs", "simulator.md"), "simulate_topics")
    expected = topics.doc_blocks(_summary("simulate_topics"))
    assert set(found) == set(expected), (set(found), set(expected))
    for key, body in found.items():
        assert body == expected[key], f"docs/simulator.md block {key} differs from docs/results/simulate_topics"
    assert _summary("simulate_topics")["command"].startswith("verl-ebpo simulate --study topics")


def test_topic_section_holds_no_number_outside_the_generated_blocks():
    text = _read("docs", "simulator.md")
    section = text[text.index("## Topics: batch order"):text.index("## Limits of the model")]
    section = re.sub(r"<!-- results:[\w:-]+ -->\n(?:(?!<!-- results:).)*?<!-- /results -->", "", section, flags=re.S)
    section = re.sub(r"`[^`]*`", "", section)
    stray = re.findall(r"[-+]?\d+\.\d+", section)
    assert not stray, f"numbers typed into docs/simulator.md's topic section: {stray[:10]}"


def test_topic_study_prose_matches_its_results():
    """docs/simulator.md's reading of the study, claim by claim, against the committed file."""
    s = _summary("simulate_topics")
    order, per_topic = s["comparisons"]["order"], s["comparisons"]["per_topic"]["eb_running"]
    Gs = [str(g) for g in s["G"]]
    # topic order lowers the prior error of the priors that track the topic, not of the running prior
    assert all(order[lab][g]["prior_err"]["class"] == "lower" for lab in ("eb_decayed", "eb_batch") for g in Gs)
    assert all(order["eb_running"][g]["prior_err"]["class"] in ("equivalent", "negligible") for g in Gs)
    # every EBPO prior is noisier under topic order; Dr.GRPO is unchanged
    for lab in ("eb_running", "eb_decayed", "eb_batch", "eb_topic"):
        assert all(order[lab][g]["noise"]["ratio"] > 1 for g in Gs), lab
    assert all(order["drgrpo"][g]["noise"]["class"] == "equivalent" for g in Gs)
    # the per-topic prior on shuffled batches: prior error several-fold lower, noise a little lower, most at G=2
    assert all(per_topic[g]["prior_err"]["ratio"] < 0.5 and per_topic[g]["prior_err"]["class"] == "lower" for g in Gs)
    noise = [per_topic[g]["noise"]["ratio"] for g in Gs]
    assert all(x < 1 for x in noise) and min(noise) == per_topic["2"]["noise"]["ratio"]
    assert s["per_topic_worth_building"] is False
    # the fixed all-fail bug: neither verl's ebpo nor the study's priors ever blow up; verl's ebpo is eb_running
    assert all(s["cells"][o][lab][g]["blowups"] == 0 for o in topics.ORDERS for lab in ("ebpo", *topics.PRIORS)
               for g in Gs)
    assert all(s["cells"][o]["ebpo"][g]["grad_noise"] == s["cells"][o]["eb_running"][g]["grad_noise"]
               for o in topics.ORDERS for g in Gs)
