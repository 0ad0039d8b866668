"""Dotted field paths (`extra_info.topic`) on verl RL tables: read a column of values (the labelling tools write
one back: `verl_ebpo.tools.labeling.fields`).

Sources read: a pyarrow Table (the labelling tools, preflight) or a HuggingFace `datasets.Dataset` (verl's
`RLHFDataset.dataframe`). A path that names no field raises `FieldNotFoundError` listing the fields that exist.
"""

from __future__ import annotations

import hashlib
from typing import Any, Sequence

_LIST_AT_MOST = 40


class FieldNotFoundError(ValueError):
    """The dotted path names no field of the table."""


def split_path(path: str) -> list[str]:
    if not isinstance(path, str) or not path or any(p == "" for p in path.split(".")):
        raise ValueError(f"a field path is dotted names such as 'extra_info.topic', got {path!r}")
    return path.split(".")


def _not_found(path: str, present: Sequence[str]) -> FieldNotFoundError:
    shown = list(present)[:_LIST_AT_MOST]
    more = f" ... and {len(present) - _LIST_AT_MOST} more" if len(present) > _LIST_AT_MOST else ""
    return FieldNotFoundError(f"field {path!r} not found; fields present: {', '.join(shown)}{more}")


# ------------------------------------------------------------------------------------------------
# arrow


def arrow_field_names(schema_or_type, prefix: str = "") -> list[str]:
    """Every field as a dotted path (structs and their children, depth first); a Schema or a struct type."""
    import pyarrow as pa

    out: list[str] = []
    for f in schema_or_type:
        name = prefix + f.name
        out.append(name)
        if pa.types.is_struct(f.type):
            out.extend(arrow_field_names(f.type, name + "."))
    return out


def _arrow_column(source: Any, path: str):
    """The values of `path` as an arrow array (a pyarrow Table, or a datasets.Dataset: only the top column is read,
    its index map applied)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    table = source
    if not isinstance(table, pa.Table):
        import datasets

        if not isinstance(source, datasets.Dataset):
            raise TypeError(f"a field is read from a pyarrow Table or a datasets.Dataset, got {type(source).__name__}")
        top = split_path(path)[0]
        if top not in source.column_names:
            raise _not_found(path, arrow_field_names(source.data.schema))
        table = source.select_columns([top]).with_format("arrow")[:]
        if table.num_rows == 0:
            return pa.array([], pa.null())
    parts = split_path(path)
    if parts[0] not in table.column_names:
        raise _not_found(path, arrow_field_names(table.schema))
    col = table.column(parts[0])
    walked = parts[0]
    for part in parts[1:]:
        if not pa.types.is_struct(col.type):
            raise FieldNotFoundError(
                f"field {path!r} not found: {walked!r} is of type {col.type}, not a struct with named fields; "
                f"fields present: {', '.join(arrow_field_names(table.schema)[:_LIST_AT_MOST])}"
            )
        names = [f.name for f in col.type]
        if part not in names:
            raise _not_found(path, arrow_field_names(table.schema))
        col = pc.struct_field(col, [names.index(part)])
        walked += "." + part
    return col


def _hash_arrow(h, arr) -> None:
    """Feed the logical content of `arr` (type, nulls, values; not its chunking or slicing) to the hash `h`."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    t = arr.type
    h.update(f"{t}:{len(arr)}:".encode())
    if arr.null_count:
        h.update(np.packbits(arr.is_null().to_numpy(zero_copy_only=False)).tobytes())
    if pa.types.is_struct(t):
        for i, child in enumerate(arr.flatten()):
            h.update(t.field(i).name.encode())
            _hash_arrow(h, child)
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        h.update(pc.fill_null(pc.list_value_length(arr), 0).to_numpy().astype(np.int64).tobytes())
        _hash_arrow(h, arr.flatten())
    elif pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        filled = pc.fill_null(arr, "" if pa.types.is_string(t) or pa.types.is_large_string(t) else b"")
        h.update(pc.binary_length(filled).to_numpy().astype(np.int64).tobytes())
        _, offsets, data = filled.buffers()
        if len(filled) and data is not None:
            wide = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
            offs = np.frombuffer(offsets, dtype=np.int64 if wide else np.int32)
            h.update(memoryview(data)[int(offs[filled.offset]) : int(offs[filled.offset + len(filled)])])
    elif pa.types.is_boolean(t) or pa.types.is_integer(t) or pa.types.is_floating(t):
        h.update(np.ascontiguousarray(pc.fill_null(arr, False if pa.types.is_boolean(t) else 0).to_numpy()).tobytes())
    else:  # rarer types (decimals, dates, maps, ...): through their Python values
        h.update(repr(arr.to_pylist()).encode())


# ------------------------------------------------------------------------------------------------
# public


def read_field(source: Any, path: str) -> list:
    """Values of the dotted field `path`, one per row (None where a row has no value)."""
    return _arrow_column(source, path).to_pylist()


def content_fingerprint(source: Any, paths: Sequence[str]) -> str:
    """Short hash of the values of `paths` in every row, in row order (a path no row has counts as absent),
    column by column at C speed (about 0.1 s for 100k prompts)."""
    h = hashlib.sha256()
    for path in paths:
        h.update(f"\0{path}\0".encode())
        try:
            _hash_arrow(h, _arrow_column(source, path))
        except FieldNotFoundError:
            h.update(b"absent")
    return h.hexdigest()[:16]

