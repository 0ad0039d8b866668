"""verl_ebpo.spec: declared option sets validate, normalise, refuse unknown keys and render their table."""

from __future__ import annotations

import math
from dataclasses import dataclass, FrozenInstanceError

import pytest

from verl_ebpo.spec import Spec, option


@dataclass(frozen=True)
class Demo(Spec):
    PREFIX = "x.y"
    mode: str = option("a", choices=("a", "b"), doc="the mode")
    rate: float = option(0.5, number=(0.0, 1.0), lo_open=True, doc="a rate")
    count: int = option(2, number=(1, math.inf), integer=True, doc="a count")
    flag: bool = option(False, doc="a flag")
    name: str = option("n", check=lambda v: v if isinstance(v, str) and v else (_ for _ in ()).throw(ValueError("must be a non-empty string")), doc="a name")


def test_defaults_and_normalisation():
    d = Demo.from_mapping({"rate": "0.25", "count": "3", "flag": "True", "mode": None})
    assert d == Demo(mode="a", rate=0.25, count=3, flag=True)
    assert isinstance(d.count, int) and d.flag is True
    with pytest.raises(FrozenInstanceError):
        d.mode = "b"


@pytest.mark.parametrize(
    "values, message",
    [
        ({"mode": "c"}, r"x.y.mode must be one of \['a', 'b'\], got 'c'"),
        ({"rate": 0}, r"x.y.rate must be a finite number in \(0, 1\], got 0"),
        ({"rate": float("nan")}, r"x.y.rate must be a finite number"),
        ({"rate": True}, r"x.y.rate must be a number, got True"),
        ({"count": 1.5}, r"x.y.count must be a whole number, got 1.5"),
        ({"count": 0}, r"x.y.count must be a whole number in \[1, inf\]"),
        ({"flag": "maybe"}, r"x.y.flag must be true or false, got 'maybe'"),
        ({"name": ""}, r"x.y.name must be a non-empty string, got ''"),
        ({"rat": 1}, r"unknown x.y option\(s\) \['rat'\]; known options: \['mode', 'rate', 'count', 'flag', 'name'\]"),
    ],
)
def test_bad_values_name_the_key(values, message):
    with pytest.raises(ValueError, match=message):
        Demo.from_mapping(values)


def test_not_a_mapping():
    with pytest.raises(ValueError, match="x.y must be a mapping of options, got list"):
        Demo.from_mapping([1, 2])


def test_markdown_table():
    table = Demo.markdown_table()
    assert table.splitlines()[:3] == ["| key | default | effect |", "|---|---|---|", "| `mode` | `a` | the mode |"]
    assert "| `flag` | `false` | a flag |" in table


def test_config_get_reads_dicts_omegaconf_and_dataclass_configs():
    from dataclasses import dataclass

    from omegaconf import OmegaConf

    from verl_ebpo.spec import config_get

    @dataclass
    class Algo:  # like verl's AlgoConfig: attributes, no .get
        adv_estimator: str = "ebpo"

    for node in ({"adv_estimator": "ebpo"}, OmegaConf.create({"adv_estimator": "ebpo"}), Algo()):
        assert config_get(node, "adv_estimator") == "ebpo"
        assert config_get(node, "missing", 7) == 7
    assert config_get(None, "adv_estimator", "x") == "x"
    assert config_get(config_get({"algorithm": {"ebpo": {"epsilon": 0.1}}}, "algorithm"), "ebpo") == {"epsilon": 0.1}
