"""recipes/REQUIRED_VERL.txt is in verl-recipe's format: KEY=VALUE lines that its install_verl.sh reads with awk
(comment lines skipped, first occurrence wins, never sourced), a MODE that script knows, and commands that run
as it runs them (`bash -c` from the caller's folder)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import verl

FILE = Path(__file__).resolve().parents[1] / "recipes" / "REQUIRED_VERL.txt"
# install_verl.sh's resolve_spec: the modes it handles and the fields each one reads
MODES = {"rolling", "pinned_tag", "pinned_commit", "reproduction_commit", "mixed", "rolling_with_baseline"}


def get_field(key: str) -> str:
    """install_verl.sh's get_field: skip `#` lines, split at the first `=`, trim, first match."""
    for line in FILE.read_text().splitlines():
        line = line.lstrip()
        if line.startswith("#") or "=" not in line:
            continue
        name, value = line.split("=", 1)
        if name == key:
            return value.rstrip()
    return ""


def test_the_file_is_what_install_verl_reads():
    assert get_field("MODE") == "pinned_tag" and get_field("MODE") in MODES
    assert get_field("UPSTREAM") == "https://github.com/verl-project/verl.git"
    assert get_field("TAG") == f"v{verl.__version__}" == "v0.9.1"
    pip = shlex.split(get_field("PIP_INSTALL"))
    assert pip[:2] == ["pip", "install"] and len(pip) == 3  # one command: install_verl runs it where it stands
    assert re.fullmatch(r"verl\[[a-z,]+\]==0\.9\.1", pip[2])
    git = get_field("GIT_SETUP")  # --method git runs it, then `cd verl && pip install -e .`
    assert git.startswith("git clone https://github.com/verl-project/verl.git && cd verl && git checkout v0.9.1")
    for line in FILE.read_text().splitlines():  # every non-comment line is KEY=VALUE with a shell-safe key
        if line.strip() and not line.lstrip().startswith("#"):
            assert re.match(r"[A-Z_]+=", line), line
