"""One way to declare and validate an option set: a frozen dataclass whose fields say their own rules.

    @dataclasses.dataclass(frozen=True)
    class MyOptions(Spec):
        PREFIX = "algorithm.ebpo"          # how a key is named in error messages
        mode: str = option("a", choices=("a", "b"), doc="what `mode` does")
        rate: float = option(1.0, number=(0.0, 1.0), lo_open=True, doc="...")
        flag: bool = option(False, doc="...")

- Construction validates and normalises every field (`"true"` -> True, `"0.5"` -> 0.5 where a number is
  declared); a bad value is a `ValueError` naming `PREFIX.key`, what it accepts and what it got.
- `MyOptions.from_mapping(m)` builds from a dict / DictConfig: an unknown key is a `ValueError` listing the
  known ones; a `None` value means "the default".
- `MyOptions.markdown_table()` renders the table of keys, defaults and effects from the same declarations,
  so documentation can be generated from (and tested against) the one definition.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, ClassVar, Mapping, Optional, Sequence

__all__ = ["Spec", "config_get", "option"]

_MISSING = dataclasses.MISSING


def config_get(node: Any, key: str, default: Any = None) -> Any:
    """`node[key]` of a config node -- a dict, an OmegaConf DictConfig (`.get`) or one of verl's dataclass configs
    (an attribute) --, or `default` when `node` is None or has no such key. The one option reader of the package."""
    if node is None:
        return default
    if hasattr(node, "get"):
        return node.get(key, default)
    return getattr(node, key, default)


def option(
    default: Any = _MISSING,
    *,
    doc: str,
    choices: Optional[Sequence[Any]] = None,
    number: Optional[tuple[float, float]] = None,
    lo_open: bool = False,
    hi_open: bool = False,
    integer: bool = False,
    check: Optional[Callable[[Any], Any]] = None,
    default_factory: Any = _MISSING,
    default_doc: Optional[str] = None,
) -> Any:
    """A dataclass field with its rule and its documentation.

    choices: the value must be one of these. number=(lo, hi): a finite number in [lo, hi] (open ends with
    lo_open / hi_open; `integer` for a whole number; use +-math.inf for no bound). check: a function that
    returns the normalised value or raises ValueError with the reason. A `bool` default makes the field a
    boolean ("true"/"false" strings accepted). default_doc: how the default reads in the table.
    """
    meta = {
        "doc": doc,
        "choices": tuple(choices) if choices is not None else None,
        "number": number,
        "lo_open": lo_open,
        "hi_open": hi_open,
        "integer": integer,
        "check": check,
        "default_doc": default_doc,
    }
    if default_factory is not _MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _as_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError("must be true or false")


def _as_number(value: Any, meta: Mapping[str, Any]) -> float | int:
    if isinstance(value, bool):
        raise ValueError("must be a number")
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError("must be a number") from None
    lo, hi = meta["number"]
    if meta["integer"]:
        if not math.isfinite(x) or x != int(x):
            raise ValueError("must be a whole number")
        x = int(x)
    low_bad = x <= lo if meta["lo_open"] else x < lo
    high_bad = x >= hi if meta["hi_open"] else x > hi
    if not math.isfinite(x) or low_bad or high_bad:
        interval = f"{'(' if meta['lo_open'] else '['}{lo:g}, {hi:g}{')' if meta['hi_open'] else ']'}"
        raise ValueError(f"must be {'a whole number' if meta['integer'] else 'a finite number'} in {interval}")
    return x


class Spec:
    """Mix-in for frozen dataclasses declared with `option(...)` fields (see the module docstring)."""

    PREFIX: ClassVar[str] = ""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            if "doc" not in f.metadata:
                continue
            value = getattr(self, f.name)
            try:
                new = self._normalise(f, value)
            except ValueError as e:
                raise ValueError(f"{self.key_name(f.name)} {e}, got {value!r}") from None
            if new is not value:
                object.__setattr__(self, f.name, new)

    @classmethod
    def key_name(cls, name: str) -> str:
        return f"{cls.PREFIX}.{name}" if cls.PREFIX else name

    @staticmethod
    def _normalise(f: dataclasses.Field, value: Any) -> Any:
        meta = f.metadata
        if isinstance(f.default, bool):
            value = _as_bool(value)
        if meta["number"] is not None:
            value = _as_number(value, meta)
        if meta["choices"] is not None and value not in meta["choices"]:
            raise ValueError(f"must be one of {list(meta['choices'])}")
        if meta["check"] is not None:
            value = meta["check"](value)
        return value

    @classmethod
    def from_mapping(cls, mapping: Any = None, **overrides: Any):
        """Build from a mapping (dict, DictConfig, None); `overrides` are defaults that the mapping's keys win over."""
        if mapping is None:
            raw: dict = {}
        elif hasattr(mapping, "items"):
            raw = dict(mapping.items())
        else:
            raise ValueError(f"{cls.PREFIX or 'options'} must be a mapping of options, got {type(mapping).__name__}")
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(str(k) for k in raw if k not in known)
        if unknown:
            raise ValueError(f"unknown {cls.PREFIX or ''} option(s) {unknown}; known options: {known}".replace("  ", " "))
        values = {**overrides, **{k: v for k, v in raw.items() if v is not None}}
        return cls(**values)

    def to_mapping(self) -> dict:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def markdown_table(cls, key_header: str = "key") -> str:
        """| key | default | effect | rows, from the fields' declarations."""
        rows = [f"| {key_header} | default | effect |", "|---|---|---|"]
        for f in dataclasses.fields(cls):
            if "doc" not in f.metadata:
                continue
            default = f.metadata["default_doc"]
            if default is None:
                default = f"`{_show(f.default)}`" if f.default is not _MISSING else "—"
            rows.append(f"| `{f.name}` | {default} | {f.metadata['doc']} |")
        return "\n".join(rows)


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "null"
    return str(value)
