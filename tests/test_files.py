"""verl_ebpo.tools.files: the one atomic-write helper (permissions, refusals, failed writes naming the file)."""

from __future__ import annotations

import errno
import json
import os
import socket
import stat
import tempfile

import pytest

from verl_ebpo.tools.files import (
    OutputPathError,
    atomic_output,
    atomic_write_text,
    check_output_path,
    check_output_paths,
    unreadable_reason,
)


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


@pytest.mark.parametrize("where", ["os.replace", "os.fsync", "os.open"])
@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EACCES])
def test_disk_full_or_no_permission_names_the_file_and_keeps_the_old_one(tmp_path, monkeypatch, where, err):
    """The OSError names the target, not only "No space left on device" or the hidden temporary file."""
    p = tmp_path / "prior.json"
    p.write_text("old")
    real = getattr(os, where.split(".")[1])

    def fail(*args, **kwargs):
        if where == "os.open" and not str(args[0]).startswith(str(tmp_path / ".prior.json")):
            return real(*args, **kwargs)
        raise OSError(err, os.strerror(err), str(tmp_path / ".prior.json.tmp-1-x"))

    monkeypatch.setattr(os, where.split(".")[1], fail)
    with pytest.raises(OSError) as e:
        atomic_write_text(p, "new")
    monkeypatch.undo()
    assert e.value.errno == err and f"cannot write {p}: {os.strerror(err)}" in str(e.value)
    assert p.read_text() == "old" and os.listdir(tmp_path) == ["prior.json"]


# -- unreadable_reason: the one "can this input be read as a file, and if not why" ------------------------------


@pytest.fixture
def short_tmp():
    """A short folder (an AF_UNIX socket path must stay under ~108 bytes)."""
    with tempfile.TemporaryDirectory(prefix="uf-", dir="/tmp") as d:
        yield d


def _make_inputs(d: str) -> dict[str, str]:
    """One path of every kind a reader may be handed."""
    j = os.path.join
    open(j(d, "file"), "w").write("{}")
    os.mkdir(j(d, "folder"))
    os.mkfifo(j(d, "fifo"))
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(j(d, "sock"))
    sock.close()  # the socket file stays
    os.symlink(j(d, "nowhere"), j(d, "dangling"))
    os.symlink(j(d, "loop_b"), j(d, "loop_a"))
    os.symlink(j(d, "loop_a"), j(d, "loop_b"))
    os.symlink(j(d, "file"), j(d, "good_link"))
    return {
        "file": j(d, "file"),
        "good link": j(d, "good_link"),
        "missing": j(d, "missing"),
        "dangling link": j(d, "dangling"),
        "link loop": j(d, "loop_a"),
        "under a file": j(d, "file", "x"),
        "folder": j(d, "folder"),
        "fifo": j(d, "fifo"),
        "socket": j(d, "sock"),
        "device": "/dev/null",
    }


# the reason each reader must give (hand-written, not computed by the function under test)
REASONS = {
    "file": None,
    "good link": None,
    "missing": "it does not exist",
    "dangling link": "which does not exist",
    "link loop": "it is a symlink loop",
    "under a file": "it does not exist (a folder on its path is a file)",
    "folder": "it is a directory, not",
    "fifo": "it is a FIFO, not",
    "socket": "it is a socket, not",
    "device": "it is a character device, not",
}


def test_unreadable_reason_names_every_kind_of_path(short_tmp):
    paths = _make_inputs(short_tmp)
    for kind, words in REASONS.items():
        why = unreadable_reason(paths[kind])
        if words is None:
            assert why is None, kind
        else:
            assert words in why, (kind, why)
    assert unreadable_reason(paths["dangling link"]) == (
        f"it is a symlink to {os.path.join(short_tmp, 'nowhere')!r}, which does not exist"
    )
    assert "does not exist" not in unreadable_reason(paths["link loop"])
    assert unreadable_reason(paths["fifo"]) == "it is a FIFO, not a regular file"
    # what a caller accepts besides a regular file, and what it says it wanted
    assert unreadable_reason(paths["folder"], allow_dir=True) is None
    assert unreadable_reason(paths["fifo"], allow_fifo=True) is None
    assert unreadable_reason(paths["fifo"], allow_dir=True) == "it is a FIFO, not a regular file"
    assert unreadable_reason(paths["socket"], expected="a parquet file") == "it is a socket, not a parquet file"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_reason_names_a_file_without_read_permission(tmp_path):
    p = tmp_path / "secret"
    p.write_text("x")
    p.chmod(0)
    assert unreadable_reason(p) == "it is not readable (permission denied)"


@pytest.mark.parametrize("kind", [k for k, v in REASONS.items() if v is not None])
def test_every_reader_gives_the_same_reason(short_tmp, kind):
    """The labelling tools' input readers (user-named files) say what is wrong with an input through files.unreadable_reason: a link loop or a path under a file is never reported
    as a bare OS error, and a FIFO never blocks."""
    from verl_ebpo.tools import labeling as lab

    path = _make_inputs(short_tmp)[kind]
    words = REASONS[kind]
    if kind != "folder":  # a folder is a parquet dataset
        with pytest.raises(lab.LabelingError) as e:
            lab.read_table(path)
        assert words in str(e.value) and path in str(e.value), ("read_table", str(e.value))
    if kind != "fifo":  # a FIFO is a streamed JSONL input
        with pytest.raises(lab.LabelingError) as e:
            lab.open_text_input(path)
        assert words in str(e.value) and path in str(e.value), ("open_text_input", str(e.value))


# -- outputs inside an input folder; outputs that are one file -------------------------------------------------


def test_an_output_inside_an_input_folder_is_refused_also_through_links(tmp_path):
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / "part-0.parquet").write_text("rows")
    (tmp_path / "data_link").symlink_to(data)
    for out in (data / "new.parquet", data / "sub" / "deep" / "x.json", data / "part-0.parquet",
                tmp_path / "data_link" / "new.parquet", data):
        for inputs in ([data], [tmp_path / "data_link"]):
            with pytest.raises(OutputPathError, match="inside the input folder"):
                check_output_path(out, inputs)
    with pytest.raises(OutputPathError, match="inside the input folder"):
        atomic_write_text(data / "new.parquet", "x", inputs=[data])
    assert sorted(os.listdir(data)) == ["part-0.parquet", "sub"]
    # beside the folder (even with the folder's name as a prefix) is fine
    assert check_output_path(tmp_path / "data2" / "x", [data]) == str(tmp_path / "data2" / "x")
    assert check_output_path(tmp_path / "data.parquet", [data]) == str(tmp_path / "data.parquet")


def test_two_outputs_that_are_one_file_are_refused(tmp_path):
    a = tmp_path / "a.md"
    a.write_text("x")
    (tmp_path / "sym").symlink_to(a)
    os.link(a, tmp_path / "hard")
    for second in (a, tmp_path / "sym", tmp_path / "hard", tmp_path / "." / "a.md"):
        with pytest.raises(OutputPathError, match="two outputs name one file"):
            check_output_paths([a, None, second])
    with pytest.raises(OutputPathError, match="two outputs name one file"):
        check_output_paths([tmp_path / "new", tmp_path / "." / "new"])  # not there yet: by path
    assert check_output_paths([a, None, tmp_path / "b"]) == [str(a), str(tmp_path / "b")]
    with pytest.raises(OutputPathError, match="input file") as e:
        check_output_paths([tmp_path / "b", tmp_path / "hard"], inputs=[a])
    assert e.value.path == str(tmp_path / "hard") and e.value.input_file == str(a)


def test_claim_folder_deletes_only_sub_folders_its_own_tool_marked(tmp_path):
    """One tool's marker does not let another tool delete (the demo's runs/ are not cpu.run's, and vice versa)."""
    from verl_ebpo.tools.folders import MARKER, FolderNotOurs, claim_folder, owned_subfolders

    out = tmp_path / "out"
    claim_folder(out, ("run",), "tool a")
    (out / "run").mkdir()
    (out / "run" / "ckpt").write_text("x")
    assert owned_subfolders(out, ("run",), "tool a") == [out / "run"]
    with pytest.raises(FolderNotOurs, match="tool b did not make"):
        claim_folder(out, ("run",), "tool b")
    assert (out / "run" / "ckpt").exists() and json.loads((out / MARKER).read_text())["tool"] == "tool a"
    claim_folder(out, ("run",), "tool a")  # the same tool re-runs: its stale run/ is gone, the marker stays
    assert not (out / "run").exists() and (out / MARKER).exists()


def test_cpu_run_refuses_a_run_folder_it_did_not_make_before_building_anything(tmp_path, capsys):
    from verl_ebpo.tools.cpu import run

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "precious.txt").write_text("keep me")
    assert run.main(["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "did not make" in err and "run/" in err
    assert (tmp_path / "run" / "precious.txt").read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no assets built, no marker
