"""Numbers that cannot go stale: every `<!-- results:NAME:KEY -->` block in README.md and docs/*.md is the
rendering (`verl_ebpo.tools.results_docs`) of docs/results/NAME/summary.json, committed next to the command that
made it, and the small simulator configurations are re-run and must reproduce their committed files.

- Every block equals its rendering: editing a number in a block fails the test.
- The results sections hold no other decimal number (outside code), so a number cannot be typed in beside them.
- docs/results/simulate_lr_small is re-made by its own `command` and must be equal (all but the timings): a change to
  the simulator that moves a published number fails it (the committed study takes half an hour, too long for the
  suite; the small one runs every code path of it).
- The demo takes tens of minutes, so it is not re-run here; its command is rebuilt from its settings.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys

import numpy as np
import pytest
from numeric import differences  # tests/numeric.py: floats within a stated tolerance

from verl_ebpo.tools import results_docs
from verl_ebpo.tools.demo import report as demo_report
from verl_ebpo.tools.simulate import lr

ROOT = os.path.join(os.path.dirname(__file__), "..")
RESULTS = os.path.join(ROOT, "docs", "results")
DOCS = ["README.md", *sorted(os.path.join("docs", n) for n in os.listdir(os.path.join(ROOT, "docs"))
                             if n.endswith(".md"))]


def _read(*parts) -> str:
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as f:
        return f.read()


def _summary(name: str) -> dict:
    return json.loads(_read("docs", "results", name, "summary.json"))


def _blocks_in(text: str, name: str) -> dict:
    """KEY -> body of every block of results NAME (a body never holds another block's start)."""
    pattern = rf"<!-- results:{re.escape(name)}:([\w-]+) -->\n((?:(?!<!-- results:).)*?)\n?<!-- /results -->"
    return dict(re.findall(pattern, text, re.S))


def _mismatches(texts: dict) -> list[str]:
    """The blocks of `texts` (file -> text) that are not the rendering of their committed results file."""
    bad = []
    for where, text in texts.items():
        for name in sorted({n for n, _ in re.findall(results_docs.START, text)}):
            expected = results_docs.render(ROOT, name)
            bad += [f"{where}: {name}:{k}" for k, body in _blocks_in(text, name).items() if body != expected.get(k)]
    return bad


def test_blocks_are_rewritten_in_place_even_when_empty():
    text = ("a\n<!-- results:x:one -->\n<!-- /results -->\nb\n<!-- results:x:two -->\nold\n<!-- /results -->\nc\n")
    new = results_docs.replace_blocks(text, {"one": "1", "two": "2"}, "x")
    assert new == "a\n<!-- results:x:one -->\n1\n<!-- /results -->\nb\n<!-- results:x:two -->\n2\n<!-- /results -->\nc\n"
    assert _blocks_in(new, "x") == {"one": "1", "two": "2"}


def test_every_block_in_the_docs_is_the_rendering_of_its_results_file():
    texts = {rel: _read(rel) for rel in DOCS}
    assert _mismatches(texts) == []
    found = {(rel, name, key) for rel, text in texts.items() for name, key in re.findall(results_docs.START, text)}
    assert {("README.md", "simulate_lr", "readme"), ("README.md", "demo_lr", "readme"),
            ("README.md", "demo_default", "readme"), ("docs/demo.md", "demo_default", "doc"),
            ("docs/simulator.md", "simulate_lr", "comparisons"), ("docs/simulator.md", "simulate_lr", "gradient")} <= found


@pytest.mark.parametrize("where, name, key", [("docs/simulator.md", "simulate_lr", "comparisons"),
                                              ("docs/simulator.md", "simulate_lr", "gradient"),
                                              ("README.md", "demo_default", "readme"),
                                              ("docs/demo.md", "demo_default", "doc")])
def test_an_edited_number_is_caught(where, name, key):
    """The check above is not vacuous: change one digit of a block and it no longer matches."""
    text = _read(where)
    body = _blocks_in(text, name)[key]
    i = re.search(r"\d\.\d{3}", body).start() + 4
    edited = text.replace(body, body[:i] + str((int(body[i]) + 1) % 10) + body[i + 1:])
    assert edited != text and _mismatches({where: edited}) == [f"{where}: {name}:{key}"]


def test_results_sections_hold_no_number_outside_the_generated_blocks():
    text = _read("docs", "simulator.md")
    section = text[text.index('<a id="learning-rate">'):text.index("## What was removed")]
    section = re.sub(r"<!-- results:[\w:-]+ -->\n(?:(?!<!-- results:).)*?<!-- /results -->", "", section, flags=re.S)
    section = re.sub(r"```.*?```", "", section, flags=re.S)
    section = re.sub(r"`[^`]*`", "", section)
    stray = re.findall(r"[-+]?\d+\.\d+", section)
    assert not stray, f"numbers typed into docs/simulator.md's results sections: {stray[:10]}"


def _numeric_perturbation() -> dict:
    """Environment variables that make this machine compute with other SIMD kernels: ATen's DEFAULT capability
    instead of its best, numpy's lowest dispatch target instead of its highest, one thread. Each moves the last
    digits of simulator values here (measured: up to 2.2e-16 relative; docs/demo.md#reproducibility), as another
    CPU does, so a test that asks for bit-equal floats fails on our own machine before it fails on a user's."""
    env = {"ATEN_CPU_CAPABILITY": "default", "OMP_NUM_THREADS": "1"}
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
        above_lowest = [t for t in __cpu_dispatch__ if __cpu_features__.get(t)][1:]
    except ImportError:
        above_lowest = []
    if above_lowest:
        env["NPY_DISABLE_CPU_FEATURES"] = " ".join(above_lowest)
    return env


@pytest.mark.parametrize("perturbed", [False, True], ids=["native", "perturbed"])
@pytest.mark.parametrize("name", ["simulate_lr_small"])
def test_small_configuration_reproduces_its_committed_file(tmp_path, name, perturbed):
    """The committed file's command, re-run: every float within tests/numeric.py's tolerance (REL 1e-9 / ABS
    1e-12; machines differ by ~1e-16), every label, count and key exactly. `perturbed`: the same under other
    SIMD kernels (`_numeric_perturbation`), the guard against a test that holds only where the file was written."""
    committed = _summary(name)
    argv = shlex.split(committed["command"])
    assert argv[:2] == ["verl-ebpo", "simulate"]
    env = {**os.environ, **(_numeric_perturbation() if perturbed else {})}
    # in a fresh interpreter, as a user runs it: a run must not depend on what this test process did before
    done = subprocess.run([sys.executable, "-m", "verl_ebpo.tools.cli", *argv[1:], "--out", str(tmp_path),
                           "--no-figure", "--quiet"], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    fresh = json.loads((tmp_path / "summary.json").read_text())
    if perturbed:  # the perturbation took effect in the run
        assert fresh["environment"]["env"]["ATEN_CPU_CAPABILITY"] == "default"
    assert differences(fresh, committed) == []


def test_the_reproduction_check_fails_on_an_edited_number_or_label():
    """The tolerance keeps the check's point: a number edited in its 7th digit, or a verdict label, is caught."""
    committed = _summary("simulate_lr_small")
    assert differences(committed, json.loads(json.dumps(committed))) == []
    edited = json.loads(json.dumps(committed))
    row = edited["at_best_lr"][0]
    diff = row["diff"]
    row["diff"] = diff * (1 + 1e-7)
    assert differences(edited, committed) == [f"/at_best_lr[0]/diff: {diff * (1 + 1e-7)!r} against {diff!r}"]
    row["diff"] = diff * (1 + 1e-13)  # machine noise is ~1e-16
    assert differences(edited, committed) == []
    row["verdict"] += "x"
    assert len(differences(edited, committed)) == 1


@pytest.mark.parametrize("name", ["simulate_lr", "simulate_lr_small"])
def test_results_files_name_their_command(name):
    s = _summary(name)
    assert s["command"].startswith("verl-ebpo simulate")
    assert _read("docs", "results", name, "results.md") == lr.results_markdown(s)


def test_demo_sections_hold_no_number_outside_the_generated_blocks():
    """No demo result typed in beside the blocks: README's demo paragraphs and docs/demo.md's Result section."""
    readme = _read("README.md")
    doc = _read("docs", "demo.md")
    for where, section in (("README.md", readme[readme.index("**`verl-ebpo demo`**"):
                                                 readme.index("## Reproduction status")]),
                           ("docs/demo.md", doc[doc.index("## Result"):doc.index("## Cost")])):
        section = re.sub(r"<!-- results:[\w:-]+ -->\n(?:(?!<!-- results:).)*?<!-- /results -->", "", section,
                         flags=re.S)
        section = re.sub(r"`[^`]*`", "", section)
        stray = re.findall(r"[-+]?\d+\.\d+|\d+%|\d{2,}(?:,\d{3})*", section)
        # allowed: "two 20-step EBPO runs" (the reproducibility check) and the intervals' 95% level
        assert set(stray) <= {"20", "95%"}, f"numbers typed into {where}'s demo results: {stray}"



# -- the demo: README.md and docs/demo.md quote docs/results/demo_default/summary.json -------------------------


def _fake_demo(algos: dict, seeds=(0, 1, 2), steps: int = 12, dapo_factor: float = 3.0) -> dict:
    """A demo summary from `demo.report.summarize` (the demo's own code): algos: name -> per-seed reward r, the
    reward r/2 in the first 2 steps and r after (so the final reward, over the last 10 steps, is r)."""
    runs = {}
    for algo, rewards in algos.items():
        runs[algo] = [demo_report.RunSeries(
            algo, seed, answers=np.full(steps, 64.0 * (dapo_factor if algo == "dapo" else 1.0)),
            reward=np.r_[[r / 2] * 2, [r] * (steps - 2)], trained_reward=np.full(steps, r), no_signal=np.full(steps, 0.5),
            step_time=np.ones(steps), greedy_before=0.0, greedy_after=r) for seed, r in zip(seeds, rewards)]
    summary = demo_report.summarize(runs)
    summary["settings"] = {"algos": list(algos), "seeds": list(seeds), "steps": steps, "batch_size": 16,
                           "group_size": 4, "lr": 0.0025, "parameters": 83008, "quick": False}
    return json.loads(json.dumps(demo_report.json_safe(summary)))  # as read back from summary.json


def test_demo_render_with_some_algorithms_known_answer():
    """Two algorithms, four seeds: exactly their rows, the one comparison, the numbers by hand."""
    s = _fake_demo({"grpo": [0.1, 0.2, 0.3, 0.4], "ebpo": [0.3, 0.5, 0.4, 0.6]}, seeds=(0, 1, 2, 3))
    blocks = results_docs.blocks(s)
    assert set(blocks) == {"readme", "doc"}
    readme = blocks["readme"]
    assert readme.startswith("`verl-ebpo demo --seeds 4 --algos grpo,ebpo --steps 12` (4 seeds x 12 steps x 16 prompts x G=4).")
    rows = [line for line in readme.splitlines() if line.startswith("| ") and not line.startswith("| |")]
    # GRPO: mean 0.25, sd 0.1291, t_{0.975,3} = 3.1824: 0.25 -+ 0.2054
    assert rows == ["| GRPO | 0.250 [0.045, 0.455] | 0.250 [0.045, 0.455] | 0.25 | 768 |",
                    "| EBPO | 0.450 [0.245, 0.655] | 0.450 [0.245, 0.655] | 0.45 | 768 |"]
    verdicts = [line for line in readme.splitlines() if line.startswith("- ")]
    # differences 0.2, 0.3, 0.1, 0.2: mean 0.2, sd 0.0816, half-width 3.1824 x 0.0408 = 0.130
    assert verdicts == ["- EBPO is higher than GRPO on final reward at an equal budget of 768 answers (+0.200, "
                        "95% CI [+0.070, +0.330], 4 seeds)."]
    assert "DAPO" not in readme and "DAPO" not in blocks["doc"].split("\n\n", 1)[1]
    assert blocks["doc"].startswith("`verl-ebpo demo --seeds 4 --algos grpo,ebpo --steps 12` (verl's real V1 trainer "
                                    "on CPU: a tiny Llama of 83,008 parameters learns `n+1=`; GRPO, EBPO; 4 seeds x "
                                    "12 steps x 16 prompts x G=4; lr 0.0025).\n\n| algorithm |")
    assert "| EBPO | 0.450 [0.245, 0.655] | 0.450 [0.245, 0.655] | 0.00 -> 0.45 [0.24, 0.66] | 768 | 50% / 50% |" in \
        blocks["doc"]
    assert len([line for line in blocks["doc"].splitlines() if line.startswith("- ")]) == 3
    # EBPO alone: no comparison, no verdict line
    alone = results_docs.blocks(_fake_demo({"ebpo": [0.3, 0.4, 0.5]}))
    assert "\n- " not in alone["readme"] and "\n- " not in alone["doc"]
    assert "| EBPO | 0.400 [0.152, 0.648] |" in alone["readme"]


def test_demo_readme_block_gives_dapo_its_equal_budget_verdict():
    """DAPO generated 3x the answers: the README quotes EBPO - DAPO at an equal budget; docs/demo.md every
    verdict."""
    s = _fake_demo({"grpo": [0.1, 0.2, 0.4], "dapo": [0.5, 0.7, 0.6], "ebpo": [0.2, 0.2, 0.3]})
    blocks = results_docs.blocks(s)
    dapo, grpo = s["comparisons"]["ebpo-dapo"], s["comparisons"]["ebpo-grpo"]
    assert "equal budget" in dapo["equal_budget_verdict"] and dapo["equal_budget_diff"] != dapo["diff"]
    verdicts = [line[2:] for line in blocks["readme"].splitlines() if line.startswith("- ")]
    assert verdicts == [grpo["equal_budget_verdict"], dapo["equal_budget_verdict"]]
    doc_verdicts = [line[2:] for line in blocks["doc"].splitlines() if line.startswith("- ")]
    assert doc_verdicts == [c[k] for c in (grpo, dapo)
                            for k in ("verdict", "equal_budget_verdict", "greedy_accuracy_verdict")]
    assert "| DAPO | 0.600 [0.352, 0.848] |" in blocks["readme"] and "| 2,304 |" in blocks["readme"]


@pytest.mark.parametrize("settings", [
    {},
    {"algos": ["grpo", "dapo", "ebpo"], "seeds": [0, 1, 2], "steps": 60, "lr": 0.0025, "parallel": 2},
    {"algos": ["grpo", "dapo", "ebpo"], "seeds": [0], "quick": True, "steps": 10, "batch_size": 16},
    {"algos": ["ebpo", "drgrpo"], "seeds": [0, 1, 2, 3, 4], "steps": 100, "lr": 0.005, "temperature": 0.7,
     "group_size": 8, "max_response_length": 6, "parallel": 1},
])
def test_demo_command_makes_the_settings_it_is_rebuilt_from(settings):
    """summary.json holds no command line: the one rebuilt from its settings, run through the demo's own CLI
    parser, gives those settings back."""
    import argparse

    from verl_ebpo.tools.demo import add_arguments, options_from_args

    line = results_docs.demo_command(settings)
    argv = shlex.split(line)
    assert argv[:2] == ["verl-ebpo", "demo"]
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    options = options_from_args(parser.parse_args(argv[2:]))
    assert options.seed_list == settings.get("seeds", [0, 1, 2])
    for key in results_docs.DEMO_FLAGS:
        if key in settings:
            got = list(options.algos) if key == "algos" else getattr(options, key)
            assert got == settings[key], key
    if not settings:
        assert line == "verl-ebpo demo"


def test_results_docs_rewrites_a_stale_block_and_refuses_a_bad_file_in_one_line(tmp_path, capsys):
    (tmp_path / "docs" / "results" / "demo_default").mkdir(parents=True)
    (tmp_path / "docs" / "results" / "demo_default" / "summary.json").write_text(_read("docs", "results", "demo_default", "summary.json"))
    (tmp_path / "README.md").write_text("a\n<!-- results:demo_default:readme -->\nstale 0.123\n<!-- /results -->\nb\n")
    (tmp_path / "docs" / "demo.md").write_text("<!-- results:demo_default:doc -->\n<!-- /results -->\n")
    assert results_docs.main(["--root", str(tmp_path)]) == 0
    assert capsys.readouterr().out.split() == ["rewrote", "README.md", "rewrote", "docs/demo.md"]
    expected = results_docs.render(ROOT, "demo_default")
    assert _blocks_in((tmp_path / "README.md").read_text(), "demo_default") == {"readme": expected["readme"]}
    assert results_docs.update(str(tmp_path)) == []  # a second pass changes nothing
    for block, body, words in [("demo_nowhere:doc", None, "demo_nowhere"), ("demo_default:nokey", None, "nokey"),
                               ("demo_x:doc", '{"tail_steps": 10', "not a results file"),
                               ("demo_x:doc", '{"tail_steps": 10}', "missing or malformed field")]:
        if body is not None:
            (tmp_path / "docs" / "results" / "demo_x").mkdir(exist_ok=True)
            (tmp_path / "docs" / "results" / "demo_x" / "summary.json").write_text(body)
        (tmp_path / "docs" / "demo.md").write_text(f"<!-- results:{block} -->\n<!-- /results -->\n")
        assert results_docs.main(["--root", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("results_docs: error: ") and words in err and len(err.strip().splitlines()) == 1, err


def test_readme_fits_its_word_bound_with_a_default_demo_run():
    """The README's block laid out for a default run (3 algorithms, 3 seeds, 60 steps, both verdicts "not
    resolved", the longest sentence) keeps README.md within test_readme's 1500 words."""
    s = _fake_demo({"grpo": [0.1, 0.3, 0.2], "dapo": [0.5, 0.9, 0.6], "ebpo": [0.3, 0.2, 0.5]}, steps=60)
    s["settings"]["parallel"], s["seconds"], s["timings"] = 2, 1500.0, {"peak_pss_gib": 8.6}
    block = results_docs.blocks(s)["readme"]
    assert block.count("not resolved") == 2 and "3,840 answers" in block
    readme = results_docs.replace_blocks(_read("README.md"), {"readme": block}, "demo_default")
    assert len(readme.split()) <= 1500


def test_results_docs_renders_every_committed_results_file():
    for name in sorted(os.listdir(RESULTS)):
        assert results_docs.render(ROOT, name)


