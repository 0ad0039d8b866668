"""The verl boundary (tests/verl_boundary_data.py): the modules that import verl are exactly the named adapters (in
their code, and at import time in a fresh process), each touch resolves in the installed verl and has a canary
test, private verl names appear only where listed, and dependencies point one way (the plugin -> never the tools;
cpu -> never demo; only `tools.cpu.backend` registers the CPU backend)."""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from verl_boundary_data import ADAPTERS, KINDS, TOUCHES, VLLM_TOUCHES, markdown_adapters, markdown_table, private_names

# on the trainer launches' worker after them (`-n 2 --dist loadgroup`): the import probe (~40 s) runs once, not on both
pytestmark = pytest.mark.xdist_group("trainer")
ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "verl_ebpo"
# The plugin: what verl imports and runs on a GPU cluster (and what it needs). Everything else is under tools/.
PLUGIN = ("__init__", "plugin", "advantage", "rewards", "samplers", "checkpoint")


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
    assert direct <= set(ADAPTERS), f"modules importing verl but not listed in verl_boundary_data.ADAPTERS: {sorted(direct - set(ADAPTERS))}"
    # a listed module imports verl itself or through a module that does (the plug-in, the cpu package's __init__)
    stale = sorted(m for m in set(ADAPTERS) - direct if not imports.get(m, set()) & direct)
    assert not stale, f"listed in verl_boundary_data.ADAPTERS but importing neither verl nor a module that does: {stale}"


def _under_an_adapter(module: str) -> bool:
    parts = module.split(".")
    return any(".".join(parts[:i]) in ADAPTERS for i in range(1, len(parts) + 1))


# Imports each module in a fresh child of one clean interpreter (fork), after the heavy verl-free libraries, and
# prints the modules under `prefix` (argv[2]) the import loaded: one interpreter start for all the modules instead of
# one each (a start that imports verl costs ~10 s). It checks first that those libraries load no verl.
_PROBE = r"""
import json, os, sys
import numpy, torch  # verl-free, and what most modules import: loaded once, before the fork
assert not [m for m in sys.modules if m == "verl" or m.startswith("verl.")], "numpy/torch loaded verl"
prefix = sys.argv[2]
result = {}
for module in json.loads(sys.argv[1]):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            __import__(module)
            out = sorted(m for m in sys.modules if m == prefix or m.startswith(prefix + "."))
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


def _probe(modules: list[str], prefix: str = "verl") -> dict[str, list[str]]:
    """module -> the modules under `prefix` that importing it (alone, in a fresh process) loaded."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("VERL_USE_EXTERNAL_MODULES", None)
    proc = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(modules), prefix], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_every_module_outside_the_adapters_imports_no_verl_when_imported():
    modules = [m for m, _ in _modules() if not _under_an_adapter(m)]
    assert "verl_ebpo.tools.demo.report" in modules and "verl_ebpo.tools.verl_logs" in modules and "verl_ebpo.tools.tiny.task" in modules
    loaded = _probe(modules)
    assert set(loaded) == set(modules)
    bad = {m: v for m, v in loaded.items() if v}
    assert not bad, f"importing these modules loads verl (or fails): {bad}; list them in ADAPTERS or import verl lazily"


@pytest.mark.slow  # a check of the probe itself (fresh interpreters, ~30 s)
def test_the_probe_sees_verl_when_an_adapter_loads_it():
    """The import check above can fail: importing the cpu package, the plug-in or the report before the move loads verl."""
    loaded = _probe(["verl_ebpo.tools.cpu.backend", "verl_ebpo.plugin", "verl_ebpo.tools.stats"])
    assert loaded["verl_ebpo.tools.cpu.backend"] and loaded["verl_ebpo.plugin"] and loaded["verl_ebpo.tools.stats"] == []


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
    registered = private_names()
    assert len(registered) >= 5
    for module, names in _private_verl_touches().items():
        for name in names & set(registered):
            homes = {t.adapter.partition(":")[0] for t in registered[name]}
            assert module in homes, f"{module} uses verl's private {name}; it belongs in {homes} (verl_boundary_data.TOUCHES)"


def test_dependencies_point_one_way():
    tops = set()
    for module, path in _modules():
        imported = _imports(path)
        parts = module.split(".")
        top = parts[1] if len(parts) > 1 else "__init__"
        tops.add(top)
        if top == "tools" and len(parts) > 2 and parts[2] == "cpu":
            assert not any(n.startswith("verl_ebpo.tools.demo") for n in imported), f"{module} imports the demo"
        if top in PLUGIN:
            bad = sorted(n for n in imported if n.startswith("verl_ebpo.tools"))
            assert not bad, f"plugin module {module} imports the tools: {bad}"
    assert tops == set(PLUGIN) | {"tools"}, f"a top-level module is neither plugin nor tools: {sorted(tops - set(PLUGIN))}"


PLUGIN_ENTRIES = ["verl_ebpo.plugin", "verl_ebpo.checkpoint", "verl_ebpo.samplers.dataset", "verl_ebpo.rewards",
                  "verl_ebpo.advantage"]
TOOL_ENTRIES = ["verl_ebpo.tools.cpu.launch", "verl_ebpo.tools.cpu.overrides", "verl_ebpo.tools.cpu.cluster",
                "verl_ebpo.tools.cpu.supervise", "verl_ebpo.tools.demo.runner", "verl_ebpo.tools.cli", "verl_ebpo.tools.cpu"]


@functools.lru_cache(maxsize=None)
def _loaded_by_each() -> dict:
    return _probe([*PLUGIN_ENTRIES, *TOOL_ENTRIES, "verl_ebpo.tools.cpu.backend"], prefix="verl_ebpo")


def _loaded_by(module: str) -> list[str]:
    return _loaded_by_each()[module]


@pytest.mark.parametrize("module", PLUGIN_ENTRIES)
def test_importing_the_plugin_loads_none_of_the_tools(module):
    """What verl imports on a GPU node (with `import verl` and its entry points) never loads a tool."""
    loaded = _loaded_by(module)
    assert module in loaded
    assert not [m for m in loaded if m.startswith("verl_ebpo.tools")], loaded


@pytest.mark.parametrize("module", TOOL_ENTRIES)
def test_importing_a_tool_does_not_register_the_cpu_backend(module):
    loaded = _loaded_by(module)
    assert module in loaded and "verl_ebpo.tools.cpu.backend" not in loaded, loaded
    assert "verl_ebpo.tools.cpu.registration" not in loaded


def test_the_backend_module_registers_the_cpu_backend():
    """The check above can fail: the backend module does load the registration."""
    assert "verl_ebpo.tools.cpu.registration" in _loaded_by("verl_ebpo.tools.cpu.backend")


def test_docs_table_is_the_registry():
    doc = (ROOT / "docs" / "verl_boundary.md").read_text()
    assert markdown_table() in doc
    assert markdown_adapters() in doc


# verl's vLLM rollout on CPU (issue 38): its touches resolve only where vLLM is installed (the second venv), so their
# resolution is tested there (tests/test_cpu_vllm.py); here: the adapters, canaries and the docs table.


@pytest.mark.parametrize("touch", VLLM_TOUCHES, ids=lambda t: t.name)
def test_each_vllm_touch_has_its_adapter_and_canary(touch):
    assert touch.kind in KINDS
    _resolve(touch.adapter)
    assert touch.adapter.partition(":")[0] in ADAPTERS or touch.kind == "format"
    test_file, _, test_name = touch.canary.partition("::")
    tree = ast.parse((ROOT / test_file).read_text())
    assert test_name in {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}, touch.canary
    assert not {t.name for t in TOUCHES} & {touch.name}


def test_docs_vllm_table_is_the_registry():
    assert markdown_table(VLLM_TOUCHES) in (ROOT / "docs" / "verl_boundary.md").read_text()


# -- the scan for private verl names (AST: no module is imported) ----------------------------------------


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def defined_private_names(tree: ast.AST) -> set[str]:
    """Private names a module defines: functions, classes, assigned names and attributes (`x._a = ...`)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                out |= {x.id if isinstance(x, ast.Name) else x.attr for x in ast.walk(target)
                        if isinstance(x, (ast.Name, ast.Attribute))}
    return {n for n in out if _private(n)}


def private_uses(tree: ast.AST) -> tuple[set[str], set[str], dict[str, set[str]]]:
    """What a module of ours does with private names: (names it reads, imports from verl, sets on another object or
    overrides in a subclass of a verl class (or of an adapter's class, which may subclass verl's); names it defines on its own: module-level names and members of its
    own classes; {verl module of a base class: private attributes a subclass sets on `self`}).

    A name verl defines that a module uses and no module defines on its own is a touch of verl's; a `self._x` of a
    verl subclass is one when the base class's module defines `_x` (the caller checks that)."""
    imported = {a.asname or a.name: n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
                and (n.module.split(".")[0] == "verl" or n.module in ADAPTERS) for a in n.names}
    used, own, verl_classes, on_self = set(), set(), [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            used.add(node.attr)
        elif isinstance(node, ast.ImportFrom) and node.module in imported.values():
            used |= {a.name for a in node.names if _private(a.name)}
        elif isinstance(node, ast.ClassDef):
            bases = [imported[b.id] for b in node.bases if isinstance(b, ast.Name) and b.id in imported]
            if bases:
                verl_classes.append(node)
                used |= {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                         and _private(n.name)}
                on_self.setdefault(bases[0], set()).update(
                    x.attr for x in ast.walk(node) if isinstance(x, ast.Attribute) and _private(x.attr)
                    and isinstance(x.ctx, ast.Store) and isinstance(x.value, ast.Name) and x.value.id == "self")
    inside = {id(n) for c in verl_classes for n in ast.walk(c)}
    for node in ast.walk(tree):
        if id(node) in inside:
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and _private(node.name):
            own.add(node.name)
        elif isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Store):
            name = node.id if isinstance(node, ast.Name) else node.attr
            if _private(name) and (isinstance(node, ast.Name) or getattr(node.value, "id", "") in ("self", "cls")):
                own.add(name)
    return used, own, on_self


@functools.lru_cache(maxsize=1)
def _verl_private_definitions() -> frozenset:
    """Every private name the installed verl defines (functions, classes, assigned names and attributes)."""
    verl_root = Path(importlib.util.find_spec("verl").origin).parent
    names = set()
    for path in verl_root.rglob("*.py"):
        try:
            names |= defined_private_names(ast.parse(path.read_text(errors="replace")))
        except SyntaxError:
            continue
    return frozenset(names)


def _private_verl_touches() -> dict[str, set[str]]:
    """module -> the private verl names it uses (an AST scan of the whole package, see private_uses)."""
    verl_names = _verl_private_definitions()
    found, all_own, uses = {}, set(), {}
    for module, path in _modules():
        used, own, on_self = private_uses(ast.parse(path.read_text()))
        for base_module, names in on_self.items():  # set on self: verl's when the base class's module defines it
            base = defined_private_names(ast.parse(Path(importlib.util.find_spec(base_module).origin).read_text()))
            used |= names & base
            own |= names - base
        uses[module] = used
        all_own |= own
    for module, used in uses.items():
        touched = (used & verl_names) - all_own
        if touched:
            found[module] = touched
    return found


def test_every_private_verl_name_the_package_uses_is_registered():
    """A new use of a private verl name (an attribute, an import, an override, an attribute set on a verl object)
    anywhere in the package fails here until a touch in verl_boundary_data.TOUCHES registers it."""
    registered = private_names()
    found = _private_verl_touches()
    assert "verl_ebpo.samplers.replay" in found  # the scan sees the replay buffer's overrides
    assert {"_select_prompt_uids", "_submit_batch_to_rollout"} <= found["verl_ebpo.tools.cpu.deterministic"]  # and a
    # subclass of the plugin's buffer
    missing = {m: sorted(n - set(registered)) for m, n in found.items() if n - set(registered)}
    assert not missing, f"private verl names used but not registered in verl_boundary_data.TOUCHES: {missing}"


def test_the_scan_finds_a_new_private_touch():
    code = ("from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer\n"
            "class B(ReplayBuffer):\n    def _clear_groups(self, p, u): pass\n"
            "def f(trainer):\n    trainer._submit_batch_to_rollout = print\n    return trainer._num_yielded\n"
            "class Ours:\n    def _helper(self): self._state = 1\n")
    used, own, on_self = private_uses(ast.parse(code))
    assert {"_clear_groups", "_submit_batch_to_rollout", "_num_yielded"} <= used
    assert {"_helper", "_state"} <= own and "_clear_groups" not in own and "_submit_batch_to_rollout" not in own
    assert on_self == {"verl.trainer.ppo.v1.replay_buffer": set()}
