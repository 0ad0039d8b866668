"""`demo` estimates its cost from the options and refuses past a documented bound unless --force (one line on
stderr, exit 2, nothing written: not even the output folder)."""

import pandas as pd
import pytest

from verl_ebpo.tools import cli
from verl_ebpo.tools.demo.options import TRAIN_ROWS_CAP, DemoOptions


def test_demo_refuses_huge_options_in_one_line_and_writes_nothing(tmp_path, capsys, monkeypatch):
    from verl_ebpo.tools.demo import runner

    monkeypatch.setattr(runner, "run_demo", lambda *a, **k: pytest.fail("the demo started"))
    out = tmp_path / "demo"
    rc = cli.main(["demo", "--out", str(out), "--steps", "5000", "--batch-size", "512"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "too large" in err and "--force" in err and "Traceback" not in err
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_demo_force_bypasses_the_bound(tmp_path, monkeypatch, capsys):
    from verl_ebpo.tools.demo import runner

    seen = []
    monkeypatch.setattr(runner, "run_demo", lambda options: seen.append(options))
    assert cli.main(["demo", "--out", str(tmp_path / "d"), "--steps", "5000", "--batch-size", "512", "--force"]) == 0
    assert seen and seen[0].force and seen[0].steps == 5000
    assert "estimated" in capsys.readouterr().out


def test_demo_estimate_and_training_rows():
    seconds, nbytes = DemoOptions().cost_estimate()
    assert 8 * 60 < seconds < 45 * 60 and nbytes < 12 * 2**30  # 2 runs at once (docs/demo.md, "Speed")
    assert DemoOptions(steps=5000, batch_size=512).train_rows == TRAIN_ROWS_CAP  # not 10 M rows
    assert DemoOptions().train_rows == 4096


def test_training_parquet_is_written_in_chunks_from_a_generator(tmp_path):
    from verl_ebpo.tools.tiny import assets, task

    path = assets.write_rl_parquet(task.iter_rows(2500, 3), tmp_path / "t.parquet", chunk=1000)
    expected = pd.DataFrame(task.make_rows(2500, 3))
    pd.testing.assert_frame_equal(pd.read_parquet(path), pd.read_parquet(
        assets.write_rl_parquet(expected.to_dict("records"), tmp_path / "u.parquet")))
    assert len(pd.read_parquet(path)) == 2500
