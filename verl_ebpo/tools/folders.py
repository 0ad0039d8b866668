"""Ownership of the tools' output folders: a tool that replaces its own sub-folders of a user-given folder on a
re-run (`verl-ebpo demo`'s `runs/` and `assets/`, `python -m verl_ebpo.tools.cpu.run`'s `run/`) first
`claim_folder`s it: the sub-folders are deleted only under a marker file (`.verl-ebpo-owner`) that the same tool
wrote there; otherwise `FolderNotOurs`, nothing touched."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path

from verl_ebpo.tools.files import atomic_write_text

MARKER = ".verl-ebpo-owner"  # in a tool's output folder: the sub-folders it names were made by that tool


class FolderNotOurs(ValueError):
    """A folder holds sub-folders a tool would replace but cannot prove it made: they are left alone."""


def _marker_tool(marker: Path):
    """The tool named by a marker that is a regular file (not a link) holding our JSON; else None."""
    if marker.is_symlink() or not marker.is_file():
        return None
    with contextlib.suppress(OSError, ValueError, AttributeError):
        return json.loads(marker.read_text(encoding="utf-8")).get("tool")
    return None


def owned_subfolders(out: "str | os.PathLike[str]", names: "tuple[str, ...]", tool: str) -> list[Path]:
    """The sub-folders `names` of `out` that `tool` may delete on a re-run, as `pathlib.Path`s (those that exist).

    A new or empty folder, or one without any of them, gives []. Raises `FolderNotOurs` (one line: what and the
    way out), touching nothing, when one exists and `out/.verl-ebpo-owner` is missing or was written by another
    tool, or when one is not a plain folder (a link, a file).
    """
    out = Path(out)
    present = [out / name for name in names if os.path.lexists(out / name)]
    if not present:
        return []
    listed = " and ".join(f"{p.name}/" for p in present)
    if _marker_tool(out / MARKER) != tool:
        raise FolderNotOurs(
            f"--out {out} already holds {listed} that {tool} did not make (no {MARKER} marker of {tool} there): "
            f"choose a new or empty folder for --out, or move {listed} away first"
        )
    for p in present:
        if p.is_symlink() or not p.is_dir():
            raise FolderNotOurs(f"--out {out}: {p.name} is not a plain folder (a link or a file), so {tool} will "
                                f"not replace it: remove it or choose another folder for --out")
    return present


def claim_folder(out: "str | os.PathLike[str]", names: "tuple[str, ...]", tool: str) -> None:
    """Make `out` `tool`'s: check what a re-run would delete (`owned_subfolders`, raises before any change),
    create the folder, write the marker atomically, delete the stale sub-folders. A folder that cannot be written
    is one line (ValueError), not a traceback."""
    from verl_ebpo import __version__

    stale = owned_subfolders(out, names, tool)
    out = os.fspath(out)
    try:
        os.makedirs(out, exist_ok=True)
        marker = {"tool": tool, "version": __version__, "owns": list(names)}
        atomic_write_text(os.path.join(out, MARKER), json.dumps(marker, sort_keys=True) + "\n")
        for folder in stale:
            shutil.rmtree(folder)
    except OSError as exc:  # not writable: say so in one line (a stale checkpoint left behind would be resumed)
        raise ValueError(f"cannot prepare --out {out}: {exc.strerror or exc} ({exc.filename or out})") from exc
