"""`demo` and `simulate` estimate their cost from the options and refuse past a documented bound unless --force
(one line on stderr, exit 2, nothing written: not even the output folder); simulate's CLI is its options Spec."""

import argparse
import dataclasses

import pandas as pd
import pytest

from verl_ebpo.tools import cli
from verl_ebpo.tools import simulate as sim_cli
from verl_ebpo.tools.demo.options import TRAIN_ROWS_CAP, DemoOptions
from verl_ebpo.tools.simulate.options import SimOptions


@pytest.mark.parametrize("argv", [
    ["--prompts", "1000000", "--features", "10000"],  # ~2,400 GiB of features
    ["--steps", "1000000", "--seeds", "10000"],  # a multi-day run
])
def test_simulate_refuses_a_huge_sweep_in_one_line_and_writes_nothing(tmp_path, capsys, monkeypatch, argv):
    from verl_ebpo.tools.simulate import regimes

    monkeypatch.setattr(regimes, "run_family", lambda *a, **k: pytest.fail("the sweep started"))
    out = tmp_path / "sim"
    rc = cli.main(["simulate", "--out", str(out), *argv])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "too large" in err and "--force" in err and "Traceback" not in err
    assert "estimated" in err and not out.exists() and list(tmp_path.iterdir()) == []


def test_simulate_force_bypasses_the_bound(tmp_path, capsys, monkeypatch):
    from verl_ebpo.tools.simulate import regimes

    class Started(Exception):
        pass

    def started(*a, **k):
        raise Started

    monkeypatch.setattr(regimes, "run_family", started)
    with pytest.raises(Started):  # past the check: the sweep would start (not actually run here)
        cli.main(["simulate", "--out", str(tmp_path / "sim"), "--steps", "1000000", "--seeds", "10000", "--force",
                  "--quiet"])


def test_simulate_estimate_grows_with_the_work_and_the_default_is_within_the_bound():
    seconds, nbytes = sim_cli.estimate_cost(SimOptions())
    assert 10 < seconds < 600 and nbytes < 2 * 2**30
    assert sim_cli.cost_line(SimOptions())[1]
    training = sim_cli.estimate_cost(SimOptions(grad_draws=0, grad_warmup=0))[0]  # the gradient part: no steps
    more = sim_cli.estimate_cost(SimOptions(steps=200, grad_draws=0, grad_warmup=0))[0]
    assert more == pytest.approx(2 * training) and seconds > training
    assert sim_cli.estimate_cost(SimOptions(regime="shared"))[0] == pytest.approx(seconds / 3)  # `all`: 3 regimes
    assert not sim_cli.cost_line(SimOptions(prompts=1_000_000, features=10_000))[1]


def test_simulate_cli_is_derived_from_the_spec():
    parser = argparse.ArgumentParser()
    sim_cli.add_arguments(parser)
    text = " ".join(parser.format_help().split())
    for f in dataclasses.fields(SimOptions):
        flag = "--" + f.name.replace("_", "-")
        assert flag in text, flag
        assert " ".join(f.metadata["help"].split())[:40] in text, f.name
    args = parser.parse_args(["--G", "2", "4", "--transfer", "0.1", "0.1", "0.1", "0.7", "--regime", "custom",
                              "--lr-grid", "0.5", "--estimators", "grpo", "ebpo:prior_decay=0.9"])
    o = sim_cli.options_from_args(args)
    assert o.G == (2, 4) and o.transfer == (0.1, 0.1, 0.1, 0.7) and o.lrs == (0.5,)
    assert o.estimators == ("grpo", "ebpo:prior_decay=0.9")
    assert sim_cli.options_from_args(parser.parse_args([])) == SimOptions()


def test_a_named_regime_fixes_its_knobs():
    with pytest.raises(ValueError, match="simulate.score_noise is fixed by regime=all"):
        SimOptions(score_noise=0.0)
    assert SimOptions(regime="custom", score_noise=0.0).score_noise == 0.0


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
