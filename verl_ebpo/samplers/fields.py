"""Dotted field paths (`extra_info.topic`) on verl RL tables: `read_field` reads a column of values from a pyarrow
Table (the labelling tools, preflight) or a HuggingFace `datasets.Dataset` (verl's `RLHFDataset.dataframe`); the
labelling tools write one back (`verl_ebpo.tools.labeling.fields`). A path that names no field raises
`FieldNotFoundError` listing the fields that exist."""

from __future__ import annotations

from typing import Any


class FieldNotFoundError(ValueError):
    """The dotted path names no field of the table."""


def split_path(path: str) -> list[str]:
    if not isinstance(path, str) or not path or "" in path.split("."):
        raise ValueError(f"a field path is dotted names such as 'extra_info.topic', got {path!r}")
    return path.split(".")


def _names(fields, prefix: str = "") -> list[str]:
    """Every field of a schema or struct type as a dotted path (structs and their children, depth first)."""
    import pyarrow as pa

    out = []
    for f in fields:
        out += [prefix + f.name, *(_names(f.type, f"{prefix}{f.name}.") if pa.types.is_struct(f.type) else [])]
    return out


def _not_found(path: str, schema, why: str = "") -> FieldNotFoundError:
    return FieldNotFoundError(f"field {path!r} not found{why}; fields present: {', '.join(_names(schema))}")


def read_field(source: Any, path: str) -> list:
    """Values of the dotted field `path`, one per row (None where a row has no value)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    parts = split_path(path)
    if not isinstance(source, pa.Table):  # a datasets.Dataset: read only the top column, its index map applied
        if parts[0] not in source.column_names:
            raise _not_found(path, source.data.schema)
        if len(source) == 0:
            return []
        source = source.select_columns([parts[0]]).with_format("arrow")[:]
    col = None
    for i, part in enumerate(parts):
        if col is not None and not pa.types.is_struct(col.type):
            raise _not_found(path, source.schema, f": {'.'.join(parts[:i])!r} is of type {col.type}, not a struct")
        names = source.column_names if col is None else [f.name for f in col.type]
        if part not in names:
            raise _not_found(path, source.schema)
        col = source.column(part) if col is None else pc.struct_field(col, [names.index(part)])
    return col.to_pylist()
