"""`verl-ebpo`: every subcommand parses, and one missing or broken module cannot break the others."""

import argparse
import re
import subprocess
import sys

import pytest

from verl_ebpo.tools import cli


@pytest.mark.parametrize("name", sorted(cli.SUBCOMMANDS))
def test_each_subcommand_has_help(name, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main([name, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert cli.SUBCOMMANDS[name][1] in " ".join(out.split())
    # one example, at the end; every option explained; defaults written one way
    assert out.rstrip().endswith("example:\n  " + cli.EXAMPLES[name]) and cli.EXAMPLES[name].startswith(f"verl-ebpo {name} ")
    parser = cli.build_parser(name)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
    for action in sub._actions:
        assert action.help, f"{name} {action.option_strings or action.dest}: no help text"
        assert "(default " not in action.help and not re.search(r"\[[^\]]*\]$", action.help), action.help


def test_defaults_are_written_one_way():
    parser = argparse.ArgumentParser()
    parser.add_argument("--a", help="a size (default 10)")
    parser.add_argument("--b", help="a size (default: 9)")
    parser.add_argument("--c", help="memory of one GPU in GB, in (0, 4096] [80]")
    parser.add_argument("--d", help="rows without a value: error (default), drop them")
    cli.uniform_defaults(parser)
    helps = [a.help for a in parser._actions[1:]]
    assert helps == ["a size (default: 10)", "a size (default: 9)", "memory of one GPU in GB, in (0, 4096] (default: 80)",
                     "rows without a value: error (default), drop them"]


def test_version_names_the_package_verl_and_the_extras_installed(capsys, monkeypatch):
    import importlib.metadata as md

    from verl_ebpo import __version__

    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    out = capsys.readouterr().out.strip()
    assert exit_info.value.code == 0 and out.startswith(f"verl-ebpo {__version__} (verl {md.version('verl')}, vllm ")
    assert "extras installed: " in out and "cpu" in out  # this suite runs with the cpu and topics extras
    # an extra counts as installed only when every distribution it requires is
    have = {"verl": "0.9.1", "verl-ebpo": __version__, "TransferQueue": "1", "matplotlib": "3"}
    monkeypatch.setattr(md, "requires", lambda name: ['TransferQueue>=0.1; extra == "cpu"', 'matplotlib; extra == "cpu"',
                                                      'scikit-learn; extra == "topics"', 'matplotlib; extra == "topics"',
                                                      "numpy"])
    monkeypatch.setattr(md, "version", lambda name: have[name] if name in have else (_ for _ in ()).throw(
        md.PackageNotFoundError(name)))
    assert cli.version_line() == (f"verl-ebpo {__version__} (verl 0.9.1, vllm not installed; extras installed: cpu; "
                                  "not installed: topics)")


def test_exit_codes_are_one_convention_said_in_the_help(capsys, monkeypatch):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "0 done; 2 refused or failed, with one line on stderr saying why" in " ".join(capsys.readouterr().out.split())
    # a command returning another code (inspect's error used to be 1) leaves the CLI as 2; 0 and 130 stay
    for returned, exits in ((1, 2), (3, 2), (0, 0), (None, 0), (130, 130), (2, 2)):
        monkeypatch.setattr(cli, "build_parser", lambda command=None, r=returned: argparse.Namespace(
            parse_args=lambda argv: argparse.Namespace(run_command=lambda args: r)))
        assert cli.main(["inspect", "x"]) == exits


def test_top_level_help_says_what_each_command_is_for(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "imported only when used" not in out and "--version" in out
    for name, (_, purpose) in cli.SUBCOMMANDS.items():
        assert f"{name} {purpose}" in out, name


def test_top_level_help_imports_no_subcommand_module():
    code = (
        "import sys\n"
        "from verl_ebpo.tools import cli\n"
        "try:\n    cli.main(['--help'])\nexcept SystemExit:\n    pass\n"
        "mods = [m for m, _ in cli.SUBCOMMANDS.values() if m in sys.modules]\n"
        "print('LOADED', mods)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "LOADED []" in out.stdout and "label-difficulty" in out.stdout


def test_only_the_chosen_module_is_imported(monkeypatch):
    broken = dict(cli.SUBCOMMANDS, demo=("verl_ebpo.no_such_module", "broken"))
    monkeypatch.setattr(cli, "SUBCOMMANDS", broken)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["inspect", "--help"])
    assert exit_info.value.code == 0
    with pytest.raises(ModuleNotFoundError):
        cli.main(["demo"])


def test_console_script_is_installed():
    out = subprocess.run(["verl-ebpo", "--help"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and "inspect" in out.stdout


def test_inspect_says_what_a_file_that_is_not_a_prior_is(tmp_path, capsys):
    """A metrics file is not a "corrupt" prior: inspect names it and says what it reads."""
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"step": 1, "data": {"critic/score/mean": 0.5}}\n{"step": 2, "data": {}}\n')
    dump = tmp_path / "1.jsonl"
    dump.write_text('{"input": "3+1=", "output": "4", "score": 1.0, "step": 1}\n')
    summary = tmp_path / "summary.json"
    summary.write_text('{\n  "algos": {}\n}\n')
    run = tmp_path / "run"
    (run / "checkpoints" / "global_step_3").mkdir(parents=True)
    (run / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("3")
    for target, what in ((metrics, "is verl's metrics file"), (dump, "is a verl rollout dump"),
                         (summary, "is a JSON file without an EBPO prior's \"schema\""),
                         (run, f"(the checkpoint root below it: {run / 'checkpoints'})")):
        assert cli.main(["inspect", str(target)]) == 2  # cli.EXIT_CODES
        err = capsys.readouterr().err
        assert what in err and "corrupt" not in err and len(err.strip().splitlines()) == 1, err
        if target != run:
            assert "inspect reads an ebpo_prior.json, the global_step_N folder holding it, or the checkpoint root" in err
