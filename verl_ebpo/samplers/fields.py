"""Dotted field paths (`extra_info.topic`) on verl RL tables: read a column of values, write one back.

Sources read: a pyarrow Table, a HuggingFace `datasets.Dataset` (verl's `RLHFDataset.dataframe`), an object
with a `.dataframe` attribute (an `RLHFDataset`), a pandas DataFrame, or a list of row dicts.
A path that names no field raises `FieldNotFoundError` listing the fields that exist.
"""

from __future__ import annotations

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
    """Every field as a dotted path (structs and their children, depth first)."""
    import pyarrow as pa

    fields = list(schema_or_type) if isinstance(schema_or_type, pa.Schema) else list(schema_or_type)
    out: list[str] = []
    for f in fields:
        name = prefix + f.name
        out.append(name)
        if pa.types.is_struct(f.type):
            out.extend(arrow_field_names(f.type, name + "."))
    return out


def _as_arrow_table(source: Any):
    """pyarrow Table for arrow-backed sources, else None."""
    import pyarrow as pa

    if isinstance(source, pa.Table):
        return source
    try:
        import datasets
    except ImportError:  # pragma: no cover - datasets ships with verl
        datasets = None
    if datasets is not None and isinstance(source, datasets.Dataset):
        return source  # handled lazily (column selection first)
    return None


def _read_arrow(table, path: str) -> list:
    import pyarrow as pa
    import pyarrow.compute as pc

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
    return col.to_pylist()


# ------------------------------------------------------------------------------------------------
# python rows


def _python_field_names(rows: Sequence[Any], prefix: str = "", depth: int = 0) -> list[str]:
    keys: dict[str, None] = {}
    nested: dict[str, list] = {}
    for r in rows:
        if isinstance(r, dict):
            for k, v in r.items():
                keys.setdefault(str(k))
                if isinstance(v, dict) and depth < 4:
                    nested.setdefault(str(k), []).append(v)
    out = []
    for k in keys:
        out.append(prefix + k)
        if k in nested:
            out.extend(_python_field_names(nested[k][:1000], prefix + k + ".", depth + 1))
    return out


def _read_rows(rows: Sequence[Any], path: str) -> list:
    parts = split_path(path)
    values: list = []
    found = False
    for r in rows:
        cur = r
        for part in parts:
            if isinstance(cur, dict) and part in cur:
                cur = cur[part]
            else:
                cur = None
                break
        else:
            found = True
        values.append(cur)
    if not found:
        raise _not_found(path, _python_field_names(rows[:1000]))
    return values


# ------------------------------------------------------------------------------------------------
# public


def read_field(source: Any, path: str) -> list:
    """Values of the dotted field `path`, one per row (None where a row has no value)."""
    if hasattr(source, "dataframe") and not hasattr(source, "column_names"):
        source = source.dataframe  # verl RLHFDataset
    table = _as_arrow_table(source)
    if table is not None:
        import pyarrow as pa

        if not isinstance(table, pa.Table):  # datasets.Dataset: select the top column, apply its index map
            top = split_path(path)[0]
            if top not in table.column_names:
                raise _not_found(path, arrow_field_names(table.data.schema))
            table = table.select_columns([top]).with_format("arrow")[:]
            if table.num_rows == 0:
                return []
        return _read_arrow(table, path)
    try:
        import pandas as pd

        if isinstance(source, pd.DataFrame):
            top = split_path(path)[0]
            if top not in source.columns:
                raise _not_found(path, [str(c) for c in source.columns])
            source = [{top: v} for v in source[top].tolist()]
    except ImportError:  # pragma: no cover
        pass
    return _read_rows(list(source), path)


def set_field(table, path: str, values: Sequence[Any]):
    """A new pyarrow Table with `path` set to `values` (other columns and struct fields keep their types).

    A top-level name adds or replaces a column; `a.b` adds or replaces field b of struct column a
    (created when a is absent); rows whose struct was null become non-null where a value is set.
    """
    import pyarrow as pa

    parts = split_path(path)
    if len(values) != table.num_rows:
        raise ValueError(f"{len(values)} values for a table of {table.num_rows} rows")
    arr = values if isinstance(values, (pa.Array, pa.ChunkedArray)) else pa.array(list(values))
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    top = parts[0]
    old = table.column(top).combine_chunks() if top in table.column_names else None
    if old is not None and len(parts) > 1 and not (pa.types.is_struct(old.type) or pa.types.is_null(old.type)):
        raise ValueError(f"cannot set {path!r}: column {top!r} is of type {old.type}, not a struct")
    new = _set_in(old, parts[1:], arr)
    if top in table.column_names:
        return table.set_column(table.column_names.index(top), top, new)
    return table.append_column(top, new)


def _set_in(arr, parts: list[str], values):
    import pyarrow as pa
    import pyarrow.compute as pc

    if not parts:
        return values
    name, rest = parts[0], parts[1:]
    n = len(values)
    if arr is None or pa.types.is_null(arr.type):
        children: dict[str, Any] = {}
        parent_valid = pa.array([False] * n)
    else:
        if not pa.types.is_struct(arr.type):
            raise ValueError(f"cannot set field {name!r} inside a value of type {arr.type}")
        # flatten(): children with the struct's own nulls merged in, so a row that was null reads null
        # (not the placeholder values stored under a null struct) once the struct becomes valid
        flat = arr.flatten()
        children = {arr.type.field(i).name: flat[i] for i in range(arr.type.num_fields)}
        parent_valid = arr.is_valid()
    child = children.get(name)
    if child is not None and rest and not pa.types.is_struct(child.type):
        raise ValueError(f"cannot set {'.'.join(parts)!r}: {name!r} is of type {child.type}, not a struct")
    children[name] = _set_in(child, rest, values)
    null_mask = pc.and_(pc.invert(parent_valid), values.is_null())
    return pa.StructArray.from_arrays(list(children.values()), names=list(children), mask=null_mask)
