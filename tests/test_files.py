"""verl_ebpo.files: the one atomic-write helper (permissions, refusals, stale temporaries)."""

from __future__ import annotations

import os
import stat

import pytest

from verl_ebpo.files import OutputPathError, atomic_output, atomic_write_text, check_output_path


def test_writes_and_replaces(tmp_path):
    p = tmp_path / "sub" / "a.json"
    atomic_write_text(p, "one")
    atomic_write_text(p, "two")
    assert p.read_text() == "two"
    assert sorted(os.listdir(p.parent)) == ["a.json"]  # no temporary left


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_new_file_honours_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        atomic_write_text(tmp_path / "f", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "f").st_mode) == 0o666 & ~umask


def test_existing_file_keeps_its_mode(tmp_path):
    p = tmp_path / "f"
    p.write_text("old")
    os.chmod(p, 0o640)
    atomic_write_text(p, "new")
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o640 and p.read_text() == "new"


def test_refuses_fifo_and_directory(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(OutputPathError, match="FIFO"):
        atomic_write_text(fifo, "x")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    with pytest.raises(OutputPathError, match="directory"):
        atomic_write_text(tmp_path, "x")
    with pytest.raises(OutputPathError, match="character device"):
        check_output_path("/dev/null")


def test_refuses_an_input_also_through_links(tmp_path):
    src = tmp_path / "in.parquet"
    src.write_text("data")
    os.symlink(src, tmp_path / "sym")
    os.link(src, tmp_path / "hard")
    for out in (src, tmp_path / "sym", tmp_path / "hard"):
        with pytest.raises(OutputPathError, match="input file"):
            atomic_write_text(out, "x", inputs=[src])
    assert src.read_text() == "data"


def test_symlink_is_followed_and_kept(tmp_path):
    target = tmp_path / "target"
    target.write_text("old")
    os.symlink(target, tmp_path / "link")
    atomic_write_text(tmp_path / "link", "new")
    assert os.path.islink(tmp_path / "link") and target.read_text() == "new"


def test_symlink_loop_is_named(tmp_path):
    os.symlink(tmp_path / "b", tmp_path / "a")
    os.symlink(tmp_path / "a", tmp_path / "b")
    with pytest.raises(OutputPathError, match="symbolic links"):
        atomic_write_text(tmp_path / "a", "x")


def test_failed_write_leaves_old_content_and_no_temporary(tmp_path):
    p = tmp_path / "f"
    p.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_output(p) as tmp:
            open(tmp, "w").write("half")
            raise RuntimeError("killed")
    assert p.read_text() == "old" and os.listdir(tmp_path) == ["f"]


def test_stale_temporary_of_a_dead_writer_is_removed(tmp_path):
    p = tmp_path / "f.json"
    stale = tmp_path / ".f.json.tmp-999999999-abc"  # no such pid
    stale.write_text("half")
    live = tmp_path / f".f.json.tmp-{os.getppid()}-abc"  # a live writer's temporary stays
    live.write_text("in progress")
    atomic_write_text(p, "x")
    assert not stale.exists() and live.exists()
