"""The verl boundary (verl_ebpo.verl_boundary): the modules that import verl are exactly the named adapters,
each touch resolves in the installed verl and has a canary test, private verl names appear only where listed,
and dependencies point one way (core -> nothing of cpu/demo; cpu -> never demo)."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from verl_ebpo.verl_boundary import ADAPTERS, KINDS, TOUCHES, markdown_table

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "verl_ebpo"
CORE = ("advantage", "rewards", "samplers", "checkpoint", "files", "spec", "stats", "verl_boundary")


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield ".".join(parts), path


def _imports(path: Path) -> set[str]:
    """Every module name an import statement in `path` names (top level and inside functions)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def _resolve(spec: str):
    module, _, attr = spec.partition(":")
    obj = importlib.import_module(module)
    for part in attr.split(".") if attr else ():
        obj = getattr(obj, part)
    return obj


def test_only_the_named_adapters_import_verl():
    importing = {m for m, p in _modules() if any(n == "verl" or n.startswith("verl.") for n in _imports(p))}
    assert importing == set(ADAPTERS), (
        f"modules importing verl but not listed in verl_boundary.ADAPTERS: {sorted(importing - set(ADAPTERS))}; "
        f"listed but not importing verl: {sorted(set(ADAPTERS) - importing)}"
    )


@pytest.mark.parametrize("touch", TOUCHES, ids=lambda t: t.name)
def test_each_touch_resolves_in_the_installed_verl_and_has_its_canary(touch):
    assert touch.kind in KINDS
    try:
        _resolve(touch.verl)
    except (ImportError, AttributeError) as e:  # the canary: verl moved or renamed what we rely on
        pytest.fail(f"verl changed '{touch.name}' ({touch.verl}), used by {touch.adapter}: {e}")
    _resolve(touch.adapter)
    assert touch.adapter.partition(":")[0] in ADAPTERS or touch.kind == "format"
    test_file, _, test_name = touch.canary.partition("::")
    tree = ast.parse((ROOT / test_file).read_text())
    assert test_name in {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}, touch.canary


def test_private_verl_names_appear_only_in_their_adapter():
    privates = {}
    for t in TOUCHES:
        if t.kind != "private":
            continue
        attr = t.verl.partition(":")[2].split(".")[-1]
        names = [attr] if attr.startswith("_") else []
        if t.name == "replica server handle":
            names = ["_server_handle", "_server_address"]
        for n in names:
            privates[n] = t.adapter.partition(":")[0]
    assert len(privates) >= 5
    for module, path in _modules():
        code = "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("#"))
        for name, home in privates.items():
            if module not in (home, "verl_ebpo.verl_boundary") and re.search(rf"\b{name}\b", code):
                pytest.fail(f"{module} uses verl's private {name}; it belongs in {home} (verl_boundary.TOUCHES)")


def test_dependencies_point_one_way():
    for module, path in _modules():
        imported = _imports(path)
        top = module.split(".")[1] if module.count(".") else ""
        if top == "cpu":
            assert not any(n.startswith("verl_ebpo.demo") for n in imported), f"{module} imports the demo"
        if top in CORE:
            bad = sorted(n for n in imported if n.startswith(("verl_ebpo.cpu", "verl_ebpo.demo", "verl_ebpo.simulate")))
            assert not bad, f"core module {module} imports {bad}"


def test_docs_table_is_the_registry():
    assert markdown_table() in (ROOT / "docs" / "verl_boundary.md").read_text()
