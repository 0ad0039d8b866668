"""`verl-ebpo compare` after the plain install (`pip install -e .`: no matplotlib), its t
known t quantiles, and `--workers` / progress."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from verl_ebpo.tools.cli import REQUIRES, main
from verl_ebpo.tools.stats import _t_quantile

ROOT = Path(__file__).resolve().parents[1]
T2 = 4.302652729749464  # t quantile 0.975 with 2 degrees of freedom (scipy)


def _runs(folder: Path) -> list[str]:
    """a: final critic/score/mean [0.3, 0.4, 0.5] over seeds 1..3; b: a + [0.1, 0.11, 0.12]; validation too."""
    args = []
    for i, seed in enumerate("123"):
        for algo, value in (("a", 0.3 + 0.1 * i), ("b", 0.4 + 0.11 * i)):
            path = folder / f"{algo}{seed}.jsonl"
            lines = [{"step": 0, "data": {"val-core/x/acc/mean@1": 0.0}}]
            lines += [{"step": s, "data": {"critic/score/mean": value}} for s in range(1, 4)]
            lines += [{"step": 3, "data": {"val-core/x/acc/mean@1": value}}]
            path.write_text("".join(json.dumps(x) + "\n" for x in lines))
            args += ["--run", f"{algo}@{seed}={path}"]
    return args


def _scorer(folder: Path) -> str:
    (folder / "known_scorer.py").write_text(
        "def score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return {'score': float(solution_str == 'right'), 'acc': solution_str == 'right'}\n")
    return "known_scorer:score"


def _gens(path: Path, correct: list[int], k: int = 4) -> Path:
    rows = [{"benchmark": "aime24", "problem_index": p, "sample_index": j, "ground_truth": "1",
             "response": "right" if j < c else "wrong"} for p, c in enumerate(correct) for j in range(k)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_compare_runs_end_to_end_without_matplotlib(tmp_path):
    """A fresh interpreter where `import matplotlib` fails (as tests/test_cli_requirements.py
    fakes a missing module): intervals computed, plots skipped with a note, exit 0."""
    assert "compare" not in REQUIRES  # nothing to install for compare
    scorer = _scorer(tmp_path)
    evals = ["--eval", f"a@1={_gens(tmp_path / 'e1.jsonl', [2, 3])}", "--eval",
             f"a@2={_gens(tmp_path / 'e2.jsonl', [3, 3])}"]
    argv = ["compare", *_runs(tmp_path), *evals, "--scorer", scorer, "--out", str(tmp_path / "out")]
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        for name in ("matplotlib",):
            sys.modules[name] = None
        from verl_ebpo.tools.cli import main
        rc = main({argv!r})
        assert not any(m.split(".")[0] == "matplotlib" and sys.modules[m] is not None
                       for m in list(sys.modules)), "matplotlib was imported"
        sys.exit(rc)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["comparison.json", "report.md"]
    doc = json.loads((out / "comparison.json").read_text())
    half = T2 * 0.1 / math.sqrt(3)
    assert doc["algos"]["a"]["metrics"]["critic/score/mean"]["ci95"] == pytest.approx([0.4 - half, 0.4 + half])
    diff = doc["comparisons"]["b-a"]["reward_all_answers"]  # = critic/score/mean: b trains on every answer
    assert diff["ci95"] == pytest.approx([0.11 - T2 * 0.01 / math.sqrt(3), 0.11 + T2 * 0.01 / math.sqrt(3)])
    # per-problem rates (seeds x problems) [[50, 75], [75, 75]]: MS_seed = MS_problem = MS_error = 156.25, so
    # Var(mean) = 156.25 / 4 = 39.0625, the one-way floor, with 1 degree of freedom
    student_t = pytest.importorskip("scipy.stats").t
    half = float(student_t.ppf(0.975, 1)) * math.sqrt(39.0625)
    e = doc["eval"]["a"]["aime24"]
    assert e["mean"] == pytest.approx(68.75) and e["ci95"] == pytest.approx([68.75 - half, 68.75 + half], rel=1e-10)
    assert "plots skipped: matplotlib is not installed (pip install 'verl-ebpo[cpu]')" in doc["notes"]
    assert "plots skipped" in (out / "report.md").read_text()


def test_t_quantile_known_values():
    # dof 1 is Cauchy: tan(pi * level / 2); dof 2: sqrt(2 / (1 - level^2) - 2)
    assert _t_quantile(0.95, 1) == pytest.approx(math.tan(math.pi * 0.95 / 2), rel=1e-12)
    assert _t_quantile(0.9, 2) == pytest.approx(math.sqrt(2 / (1 - 0.81) - 2), rel=1e-12)
    with pytest.raises(ValueError, match="t quantile needs"):
        _t_quantile(0.95, 0.5)


# -- --workers and progress -------------------------------------------------------------------------------------


def test_eval_scoring_shows_a_progress_bar_on_stderr_and_quiet_silences_it(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("known_scorer", None)
    scorer = _scorer(tmp_path)
    gens = _gens(tmp_path / "g.jsonl", [2, 3])
    capsys.readouterr()
    assert main(["compare", "--eval", f"a@1={gens}", "--scorer", scorer, "--out", str(tmp_path / "o")]) == 0
    err = capsys.readouterr().err
    assert "scoring a@1: 100%" in err and "8/8" in err
    assert main(["compare", "--eval", f"a@1={gens}", "--scorer", scorer, "--out", str(tmp_path / "o"),
                 "--quiet"]) == 0
    assert "scoring" not in capsys.readouterr().err


def test_workers_sizes_the_verifier_pool_of_the_default_reward(tmp_path, monkeypatch):
    """The package's reward gets `processes=--workers` (its verifier pool's size); a scorer that names a
    `processes` parameter gets it too; any other scorer is called as before."""
    from verl_ebpo.rewards import score as score_mod

    seen = []

    def judge(solution_str, ground_truth, options=None):
        seen.append(options.processes)
        return "correct", "1"

    monkeypatch.setattr(score_mod, "verdict_of", judge)
    gens = _gens(tmp_path / "g.jsonl", [2, 3])
    assert main(["compare", "--eval", f"a@1={gens}", "--workers", "3", "--out", str(tmp_path / "o"), "--quiet"]) == 0
    assert seen == [3] * 8
    (tmp_path / "pool_scorer.py").write_text(
        "SEEN = []\n"
        "def score(data_source, solution_str, ground_truth, extra_info=None, processes=None):\n"
        "    SEEN.append(processes)\n"
        "    return {'score': 1.0}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("pool_scorer", "known_scorer"):
        sys.modules.pop(name, None)
    assert main(["compare", "--eval", f"a@1={gens}", "--workers", "2", "--scorer", "pool_scorer:score",
                 "--out", str(tmp_path / "o"), "--quiet"]) == 0
    assert sys.modules["pool_scorer"].SEEN == [2] * 8
    assert main(["compare", "--eval", f"a@1={gens}", "--workers", "2", "--scorer", _scorer(tmp_path),
                 "--out", str(tmp_path / "o"), "--quiet"]) == 0  # no `processes` parameter: not passed
