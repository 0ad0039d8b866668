"""The verl boundary (verl_ebpo.verl_boundary): the modules that import verl are exactly the named adapters (in
their code, and at import time in a fresh process), each touch resolves in the installed verl and has a canary
test, private verl names appear only where listed, and dependencies point one way (core and the shared helpers
-> nothing of cpu/demo/simulate; cpu -> never demo)."""

from __future__ import annotations

import ast
import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from verl_ebpo.verl_boundary import ADAPTERS, KINDS, TOUCHES, markdown_adapters, markdown_table

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "verl_ebpo"
CORE = ("advantage", "rewards", "samplers", "checkpoint", "files", "spec", "stats", "verl_boundary")
SHARED = ("verl_logs", "tiny")  # verl-free helpers of the cpu backend, the demo and the tests


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


def _imports_verl(names) -> bool:
    return any(n == "verl" or n.startswith("verl.") for n in names)


def test_only_the_named_adapters_import_verl():
    imports = {m: _imports(p) for m, p in _modules()}
    direct = {m for m, names in imports.items() if _imports_verl(names)}
    assert direct <= set(ADAPTERS), f"modules importing verl but not listed in verl_boundary.ADAPTERS: {sorted(direct - set(ADAPTERS))}"
    # a listed module imports verl itself or through a module that does (the plug-in, the cpu package's __init__)
    stale = sorted(m for m in set(ADAPTERS) - direct if not imports.get(m, set()) & direct)
    assert not stale, f"listed in verl_boundary.ADAPTERS but importing neither verl nor a module that does: {stale}"


def _under_an_adapter(module: str) -> bool:
    parts = module.split(".")
    return any(".".join(parts[:i]) in ADAPTERS for i in range(1, len(parts) + 1))


# Imports each module in a fresh child of one clean interpreter (fork), after the heavy verl-free libraries, and
# prints the verl modules the import loaded. The parent checks first that those libraries load no verl.
_PROBE = r"""
import json, os, sys
import numpy, torch  # verl-free, and what most modules import: loaded once, before the fork
assert not [m for m in sys.modules if m == "verl" or m.startswith("verl.")], "numpy/torch loaded verl"
result = {}
for module in json.loads(sys.argv[1]):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            __import__(module)
            out = [m for m in sys.modules if m == "verl" or m.startswith("verl.")][:5]
        except BaseException as exc:
            out = ["import failed: %r" % (exc,)]
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    result[module] = json.loads(data or b'["no answer"]')
print(json.dumps(result))
"""


def test_every_module_outside_the_adapters_imports_no_verl_when_imported():
    modules = [m for m, _ in _modules() if not _under_an_adapter(m)]
    assert "verl_ebpo.demo.report" in modules and "verl_ebpo.verl_logs" in modules and "verl_ebpo.tiny.task" in modules
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("VERL_USE_EXTERNAL_MODULES", None)
    proc = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(modules)], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(loaded) == set(modules)
    bad = {m: v for m, v in loaded.items() if v}
    assert not bad, f"importing these modules loads verl (or fails): {bad}; list them in ADAPTERS or import verl lazily"


def test_the_probe_sees_verl_when_an_adapter_loads_it():
    """The import check above can fail: importing the cpu package, the plug-in or the report before the move loads verl."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(["verl_ebpo.cpu", "verl_ebpo.plugin", "verl_ebpo.stats"])],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    assert loaded["verl_ebpo.cpu"] and loaded["verl_ebpo.plugin"] and loaded["verl_ebpo.stats"] == []


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
        if top in CORE + SHARED:
            bad = sorted(n for n in imported if n.startswith(("verl_ebpo.cpu", "verl_ebpo.demo", "verl_ebpo.simulate")))
            assert not bad, f"core or shared module {module} imports {bad}"


def test_docs_table_is_the_registry():
    doc = (ROOT / "docs" / "verl_boundary.md").read_text()
    assert markdown_table() in doc
    assert markdown_adapters() in doc
