"""Writing a dotted field (`extra_info.topic`) back into a pyarrow table: what the labelling tools write (the
plugin's `verl_ebpo.samplers.fields` only reads)."""

from __future__ import annotations

from typing import Any, Sequence

from verl_ebpo.samplers.fields import split_path


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
