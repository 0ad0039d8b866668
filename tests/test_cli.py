"""`verl-ebpo`: every subcommand parses, and one missing or broken module cannot break the others."""

import subprocess
import sys

import pytest

from verl_ebpo.tools import cli


@pytest.mark.parametrize("name", sorted(cli.SUBCOMMANDS))
def test_each_subcommand_has_help(name, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main([name, "--help"])
    assert exit_info.value.code == 0
    assert cli.SUBCOMMANDS[name][1] in capsys.readouterr().out


def test_top_level_help_imports_no_subcommand_module():
    code = (
        "import sys\n"
        "from verl_ebpo.tools import cli\n"
        "try:\n    cli.main(['--help'])\nexcept SystemExit:\n    pass\n"
        "mods = [m for m, _ in cli.SUBCOMMANDS.values() if m in sys.modules]\n"
        "print('LOADED', mods)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
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
    out = subprocess.run(["verl-ebpo", "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "inspect" in out.stdout
