"""recipes/eval/score.py's workers and progress: `--workers` sizes the verifier pool, a tqdm bar on stderr while
scoring, `--no-progress` silences it."""

from __future__ import annotations

import os
import sys

from test_recipes_eval import EVAL, fake_generations, run_score

sys.path.insert(0, str(EVAL))
import score  # noqa: E402


def test_score_workers_size_the_verifier_pool(tmp_path, monkeypatch, capsys):
    """--workers 3 reaches compute_score as the pool's size: 3 threads get 3 verifiers, not a queue for 2."""
    from verl_ebpo.rewards import pool as pool_module
    from verl_ebpo.rewards import score as score_module

    monkeypatch.setattr(pool_module, "MAX_PROCESSES", 8, raising=False)
    pool_module.shutdown()
    asked = []
    real = score_module.get_pool
    monkeypatch.setattr(score_module, "get_pool", lambda size: asked.append(size) or real(size))
    gens = fake_generations(tmp_path / "gens.jsonl")
    assert score.main(["--model", "qwen3_8b", "--run", f"grpo={gens}", "--workers", "3", "--no-progress"]) == 0
    assert asked and set(asked) == {3}
    assert capsys.readouterr().err == ""


def test_score_gives_processes_to_a_scorer_that_takes_it(tmp_path):
    (tmp_path / "sizing_scorer.py").write_text(
        "import os\n"
        "from verl_ebpo.rewards import compute_score\n"
        "def score(data_source=None, solution_str=None, ground_truth=None, extra_info=None, processes=None):\n"
        "    with open(os.environ['SIZING_LOG'], 'a') as f:\n"
        "        f.write(f'{processes}\\n')\n"
        "    return compute_score(data_source, solution_str, ground_truth, extra_info, processes=processes or 1)\n"
    )
    log = tmp_path / "sizes.txt"
    gens = fake_generations(tmp_path / "gens.jsonl")
    env = {"PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "SIZING_LOG": str(log)}
    old = dict(os.environ)
    os.environ.update(env)
    try:
        out = run_score("--run", f"grpo={gens}", "--workers", "2", "--scorer", "sizing_scorer:score")
    finally:
        os.environ.clear()
        os.environ.update(old)
    assert out.returncode == 0, out.stderr[-2000:]
    assert set(log.read_text().split()) == {"2"}
    # the progress bar: count, rate and time left on stderr
    assert "scoring grpo" in out.stderr and "188/188" in out.stderr and "answer/s" in out.stderr
    assert "<" in out.stderr  # tqdm's elapsed<remaining


def test_score_no_progress_prints_no_bar(tmp_path):
    gens = fake_generations(tmp_path / "gens.jsonl")
    out = run_score("--run", f"grpo={gens}", "--workers", "2", "--no-progress")
    assert out.returncode == 0 and out.stderr == "", out.stderr[-2000:]
