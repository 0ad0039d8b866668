"""The labelling tools' files and shared rules: reading inputs, writing outputs, rows without a value.

Library errors (`LabelingError`) name arguments (`workers`, `index_field`); the CLI (`cli.py`) maps them to its
flags. The missing-value rule is `verl_ebpo.samplers.ordering.is_missing` (the orderings' own).
"""

from __future__ import annotations

import os
import stat
from typing import Any, Sequence

from verl_ebpo.samplers.ordering import is_missing

_SHOW = 5
MISSING_CHOICES = ("error", "drop", "fill", "keep")
TOPICS_EXTRA = "pip install 'verl-ebpo[topics]'"


class LabelingError(ValueError):
    """Bad input for a labelling tool (the message names what is wrong)."""


def _check_input(path: str, **kinds) -> None:
    """LabelingError naming an input that cannot be read (`verl_ebpo.tools.files.unreadable_reason`; nothing is opened,
    so a FIFO cannot block)."""
    from verl_ebpo.tools.files import unreadable_reason

    why = unreadable_reason(path, **kinds)
    if why:
        raise LabelingError(f"input file {path}: {why}")


def read_table(path: str):
    """The parquet file (or folder of parquet files) at `path`; a FIFO, device or socket is refused at once
    (parquet needs to seek, and a FIFO would block)."""
    import pyarrow.parquet as pq

    _check_input(path, allow_dir=True, expected="a regular parquet file or a folder of them")
    try:
        return pq.read_table(path)
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError, ArrowIOError an OSError
        raise LabelingError(f"cannot read {path} as parquet: {e}") from None


def open_text_input(path: str):
    """A text stream for a JSONL input: a regular file, or a FIFO/pipe (`<(...)`). A stat refuses anything else
    before opening; a FIFO is opened non-blocking (an orphan one would block open(); with O_NONBLOCK its first
    read is end-of-file) and then switched back to blocking reads, so a pipe with a writer streams."""
    _check_input(path, allow_fifo=True, expected="a regular file or a pipe")
    if not stat.S_ISFIFO(os.stat(path).st_mode):
        return open(path, encoding="utf-8")
    import fcntl

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return os.fdopen(fd, encoding="utf-8")


def write_table(table, path: str, inputs=()) -> None:
    """Write parquet atomically (a crash leaves the old file or the new one); never over an input."""
    import pyarrow.parquet as pq

    from verl_ebpo.tools.files import atomic_output

    with atomic_output(path, inputs) as tmp:
        pq.write_table(table, tmp)


def check_outputs(
    outputs: Sequence[str | None], inputs: Sequence[str], hint: tuple[str, str, str] | None = None
) -> None:
    """Refuse, once and before any slow work, outputs that would destroy something: an input file (also via a
    link), a path inside an input folder, a non-regular file (FIFO, device, folder), or two outputs naming one
    file (`verl_ebpo.tools.files.check_output_paths`; OutputPathError). `hint` = (output, input, text): `text` is
    appended when that output would replace that input."""
    from verl_ebpo.tools.files import OutputPathError, check_output_paths

    try:
        check_output_paths(outputs, inputs)
    except OutputPathError as e:
        if hint is None or (e.path, e.input_file) != hint[:2]:
            raise
        raise OutputPathError(f"{e}{hint[2]}", path=e.path, input_file=e.input_file) from None


def check_count(name: str, value: Any, minimum: int = 1) -> int:
    """An integer argument `name` >= minimum (the one check of k, batch_size, top_words, workers,
    max_scorer_errors); LabelingError naming the argument."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise LabelingError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if value < minimum:
        raise LabelingError(f"{name} must be >= {minimum}, got {value}")
    return value


def rows_error(what: str, rows: Sequence[int], n: int, hint: str) -> LabelingError:
    return LabelingError(f"{len(rows)} of {n} rows {what} (first row indices: {list(rows[:_SHOW])}); {hint}")


def _field_exists(table, path: str) -> bool:
    from verl_ebpo.samplers.fields import FieldNotFoundError, read_field

    try:
        read_field(table.slice(0, 0) if table.num_rows else table, path)
        return True
    except FieldNotFoundError:
        return False


def check_destination(table, path: str, overwrite: bool) -> None:
    if not overwrite and _field_exists(table, path):
        raise LabelingError(f"the input already has a field {path!r}; pass overwrite=True to replace it")


def read_or_default(table, path: str, default: Any) -> list:
    """`path`'s values, or `default` for every row when the table has no such field."""
    from verl_ebpo.samplers.fields import FieldNotFoundError, read_field

    try:
        return read_field(table, path)
    except FieldNotFoundError:
        return [default] * table.num_rows


def apply_missing(table, values: list, missing: str, fill_value: Any, what: str):
    """Handle rows whose value is missing: error | drop | fill (with fill_value) | keep (leave null).

    Returns (table, values, note)."""
    n = len(values)
    bad = [i for i, v in enumerate(values) if is_missing(v)]
    if not bad:
        return table, values, ""
    if missing == "error":
        raise rows_error(what, bad, n, "choose where they go with missing=drop|fill")
    if missing == "drop":
        bad_set = set(bad)
        keep = [i for i in range(n) if i not in bad_set]
        return table.take(keep), [values[i] for i in keep], f"{len(bad)} rows without a value dropped"
    if missing == "fill":
        if fill_value is None:
            raise LabelingError("missing=fill needs a fill_value")
        return table, [fill_value if is_missing(v) else v for v in values], f"{len(bad)} rows filled with {fill_value!r}"
    if missing == "keep":
        return table, [None if is_missing(v) else v for v in values], f"{len(bad)} rows left without a value"
    raise LabelingError(f"missing={missing!r} is not one of {list(MISSING_CHOICES)}")
