"""Writing files safely: the one helper every file this package writes goes through.

`atomic_write_text` / `atomic_output` write to a temporary file in the target's folder,
fsync it, give it the permissions a plain `open(path, "w")` would (the target's own mode when it exists, else
0o666 minus the umask, applied by the kernel at creation), rename it over the target and fsync the folder. A crash
leaves the old file or the new one, never half a file (a writer killed mid-write may leave its hidden
`.NAME.tmp-*` beside it: harmless, never read). A failed write (disk full, no permission) is an OSError naming
the target; the target is untouched and the temporary file removed.

They refuse, with `OutputPathError` naming the path and the way out:
- a target that exists and is not a regular file (a FIFO, a device, a folder, a socket): writing would replace it;
- a target that is the same file as one of `inputs` (also through a symlink or a hard link): the input would be lost.
- a target inside an input that is a folder (a parquet dataset, a data source folder), links resolved;
- (`check_output_paths`) two outputs of one run that are one file.
A symlink to a regular file is followed: the file it points to is replaced and the link kept.

Reading: `unreadable_reason(path)` says why a path cannot be read as an input file (missing, a dangling link, a
link loop, a folder, a FIFO/device/socket, no read permission), without opening it, so a FIFO never blocks.

Ownership markers of the tools' output folders live with those tools (`verl_ebpo.tools.folders`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from typing import Iterable, Iterator

_TMP_TAG = ".tmp-"


class OutputPathError(ValueError):
    """An output path that must not be written (not a regular file, or the same file as an input).

    `path` is the refused output and `input_file` the input it would have replaced (None for other refusals)."""

    def __init__(self, message: str, path: "str | None" = None, input_file: "str | None" = None):
        super().__init__(message)
        self.path = path
        self.input_file = input_file


def current_umask() -> int:
    """The process umask (set and restored: call it from one thread; recipes/data/prepare_data.py uses it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def unreadable_reason(
    path: "str | os.PathLike[str]", *, allow_dir: bool = False, allow_fifo: bool = False,
    expected: str = "a regular file",
) -> "str | None":
    """Why `path` cannot be read as an input file, or None when it can. Nothing is opened (a FIFO cannot block).

    The reason is a phrase to put after the path ("{path}: {reason}"): "it does not exist", "it is a symlink to
    'x', which does not exist", "it is a symlink loop (...)", "it is a FIFO, not a regular file", "it is not
    readable (permission denied)", ... A link is followed; a loop is never reported as "does not exist".
    `allow_dir` accepts a folder (a parquet dataset), `allow_fifo` a FIFO/pipe (a stream read to its end);
    `expected` names what was wanted in the "not ..." part of the reason.
    """
    path = os.fspath(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            return f"it is a symlink to {os.readlink(path)!r}, which does not exist"
        return "it does not exist"
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "it is a symlink loop (following its links never reaches a file)"
        if e.errno == errno.ENOTDIR:
            return "it does not exist (a folder on its path is a file)"
        return f"it cannot be reached ({e.strerror or e})"
    mode = st.st_mode
    ok = stat.S_ISREG(mode) or (allow_dir and stat.S_ISDIR(mode)) or (allow_fifo and stat.S_ISFIFO(mode))
    if not ok:
        return f"it is {_kind(mode)}, not {expected}"
    if not os.access(path, os.R_OK):
        return "it is not readable (permission denied)"
    return None


def check_output_path(path: "str | os.PathLike[str]", inputs: Iterable["str | os.PathLike[str]"] = ()) -> str:
    """The real path to write `path` to, or `OutputPathError` if writing there would destroy something.

    A symlink is resolved (a loop is an error naming it); the result may not exist yet. `inputs` are the paths
    the writer reads: a file may not be the output (also through a symlink or a hard link); a folder (a parquet
    dataset, a data source folder; links resolved) may not hold the output anywhere inside it, since its files
    are what a later run reads as input.
    """
    path = os.fspath(path)
    real = os.path.realpath(path)
    inputs = [os.fspath(i) for i in inputs]
    for folder in inputs:
        if os.path.isdir(folder) and os.path.commonpath([real, os.path.realpath(folder)]) == os.path.realpath(folder):
            raise OutputPathError(
                f"refusing to write {path}: it is inside the input folder {folder}; choose another output path"
            )
    try:
        st = os.stat(real)
    except FileNotFoundError:
        return real  # created by the write
    except OSError as e:  # a symlink loop, a permission problem: say what it is, not "does not exist"
        raise OutputPathError(f"cannot write {path}: {e.strerror or e}") from e
    if not stat.S_ISREG(st.st_mode):
        raise OutputPathError(
            f"refusing to write {path}: it is {_kind(st.st_mode)}, not a regular file; choose another output path"
        )
    for inp in inputs:
        try:
            same = os.path.samefile(real, inp)
        except OSError:
            same = False
        if same:
            raise OutputPathError(f"refusing to write {path}: it is the input file {inp}; choose another output path",
                                  path=path, input_file=inp)
    return real


def check_output_paths(
    outputs: Iterable["str | os.PathLike[str] | None"], inputs: Iterable["str | os.PathLike[str]"] = ()
) -> list[str]:
    """`check_output_path` for each of `outputs` (None: an output not asked for, skipped), and refuse two outputs
    that are one file (the same path, a symlink to the other, or hard links of one existing file): the second
    write would replace the first. Call it once, before any slow work. Returns the real paths."""
    inputs = [os.fspath(i) for i in inputs]
    seen: dict[object, str] = {}
    reals = []
    for out in outputs:
        if out is None:
            continue
        out = os.fspath(out)
        real = check_output_path(out, inputs)
        try:
            st = os.stat(real)
            key: object = (st.st_dev, st.st_ino)
        except OSError:
            key = real
        if key in seen:
            raise OutputPathError(f"two outputs name one file ({seen[key]} and {out}); give each output its own path")
        seen[key] = out
        reals.append(real)
    return reals


def _kind(mode: int) -> str:
    return {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device",
            stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket"}.get(stat.S_IFMT(mode), "not a regular file")


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists (this process counts as alive). Stays for recipes/data/prepare_data.py's
    staging folders."""
    try:
        os.kill(pid, 0)  # signal 0: nothing sent, only checked (this process is alive too)
    except ProcessLookupError:
        return False
    except OSError:  # alive, owned by another user
        return True
    return True


def fsync_dir(directory: "str | os.PathLike[str]") -> None:
    """Make a rename in `directory` durable (best effort: some file systems refuse)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_output(path: "str | os.PathLike[str]", inputs: Iterable["str | os.PathLike[str]"] = ()) -> Iterator[str]:
    """Yield a temporary path to write `path`'s new content to; on normal exit it replaces `path` atomically.

    For writers that take a path (`pyarrow.parquet.write_table(table, tmp)`, `df.to_parquet(tmp)`). On an
    exception the temporary file is removed and `path` is untouched. See the module docstring for the rules.
    """
    real = check_output_path(path, inputs)
    directory, name = os.path.split(real)
    tmp = None
    try:
        os.makedirs(directory or ".", exist_ok=True)
        tmp = os.path.join(directory, f".{name}{_TMP_TAG}{os.getpid()}-{secrets.token_hex(4)}")
        # O_EXCL with mode 0o666: the kernel applies the umask, as open(path, "w") does
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        yield tmp
        if os.path.exists(real):
            os.chmod(tmp, stat.S_IMODE(os.stat(real).st_mode))
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, real)
    except BaseException as exc:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        if isinstance(exc, OSError) and not isinstance(exc, OutputPathError):
            # disk full, no permission: name the file (the OS error names at most our hidden temporary)
            msg = f"cannot write {os.fspath(path)}: {exc.strerror or exc}"
            raise (OSError(exc.errno, msg) if exc.errno else OSError(msg)) from exc
        raise
    fsync_dir(directory)


def atomic_write_text(path: "str | os.PathLike[str]", text: "str | bytes",
                      inputs: Iterable["str | os.PathLike[str]"] = ()) -> None:
    """Write `text` (a str as UTF-8, or bytes) to `path` atomically (see the module docstring)."""
    with atomic_output(path, inputs) as tmp:
        with open(tmp, "wb") as f:
            f.write(text.encode("utf-8") if isinstance(text, str) else text)


atomic_write_bytes = atomic_write_text  # the name simulate/lr.py writes its figure with
