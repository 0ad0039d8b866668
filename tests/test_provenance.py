"""Results files record what computed them, and the README's set-up installs the versions they were computed with."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from verl_ebpo.tools import provenance

ROOT = Path(__file__).resolve().parents[1]


def _constraints() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not NAME==VERSION"
            pins[name.lower().replace("_", "-")] = version
    return pins


def test_environment_records_the_variables_that_choose_kernels_and_the_versions():
    code = "import json; from verl_ebpo.tools import provenance; print(json.dumps(provenance.environment()))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=True,
                         env={"PATH": "/usr/bin:/bin", "ATEN_CPU_CAPABILITY": "default", "OMP_NUM_THREADS": "1",
                              "MKL_CBWR": "AVX2", "UNRELATED": "x", "OMP_PROC_BIND": "y"})
    env = json.loads(out.stdout)
    assert env["env"] == {"ATEN_CPU_CAPABILITY": "default", "OMP_NUM_THREADS": "1", "MKL_CBWR": "AVX2"}
    assert env["packages"]["numpy"] == subprocess.run([sys.executable, "-c", "import numpy; print(numpy.__version__)"],
                                                      capture_output=True, text=True, check=True).stdout.strip()


def test_the_readme_installs_the_pinned_versions_of_every_package_that_computes():
    readme = (ROOT / "README.md").read_text()
    for marker in ("main-command", "test-command"):
        block = re.search(rf"<!-- {marker} -->\n```bash\n(.*?)```", readme, re.S).group(1)
        assert "pip install -c constraints.txt torch==2.13.0 " in block, marker
    pins = _constraints()
    missing = [p for p in provenance.PACKAGES if p not in ("torch", "verl-ebpo") and p.lower() not in pins]
    assert missing == [], f"constraints.txt does not pin {missing}"


def test_the_pins_are_what_this_environment_runs():
    """The suite runs on the pinned versions (the CI machine installs with constraints.txt): a pin edited without
    re-running the results would fail here first."""
    import importlib.metadata as md
    wrong = {}
    for name, version in _constraints().items():
        try:
            have = md.version(name)
        except md.PackageNotFoundError:
            continue  # an extra this environment did not install
        if have != version:
            wrong[name] = (have, version)
    assert wrong == {}, f"installed vs constraints.txt: {wrong}"
