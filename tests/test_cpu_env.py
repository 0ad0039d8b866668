"""Every environment variable the tools read (`verl_ebpo.tools.env`): one table, range-checked, named when refused."""

import re
from pathlib import Path

import pytest

from verl_ebpo.tools import env

ROOT = Path(__file__).resolve().parents[1]
NUMBERS = [name for name, var in env.VARIABLES.items() if not var.choices]


@pytest.mark.parametrize("name", sorted(env.VARIABLES))
def test_unset_or_empty_is_the_default_and_a_word_is_refused_naming_the_variable(name):
    var = env.VARIABLES[name]
    assert env.read(name, {}) == env.read(name, {name: " "}) == var.default
    for word in ("abc", "1e", "vllm2"):
        with pytest.raises(env.EnvVarError, match=re.escape(f"{name} must be {var.accepts()}, got {word!r}")):
            env.read(name, {name: word})


@pytest.mark.parametrize("name", NUMBERS)
@pytest.mark.parametrize("raw", ["nan", "inf", "-inf", "NaN"])
def test_nan_and_inf_are_refused_naming_the_variable(name, raw):
    with pytest.raises(env.EnvVarError, match=rf"^{name} must be .*, got '{raw}'$"):
        env.read(name, {name: raw})


@pytest.mark.parametrize("name", NUMBERS)
def test_out_of_range_is_refused_and_the_bounds_are_accepted(name):
    var = env.VARIABLES[name]
    for raw in (str(var.low - 1), str(var.high + 1), str(var.high * 1000)):
        with pytest.raises(env.EnvVarError, match=rf"^{name} must be .* in [\[(]{var.low:g}, {var.high:g}\]"):
            env.read(name, {name: raw})
    assert env.read(name, {name: str(var.kind(var.high))}) == var.high
    if var.low_open:
        with pytest.raises(env.EnvVarError, match=name):
            env.read(name, {name: str(var.kind(var.low))})
    else:
        assert env.read(name, {name: str(var.kind(var.low))}) == var.low
    assert isinstance(env.read(name, {name: str(var.kind(var.high))}), var.kind)


def test_integers_refuse_fractions_and_choices_refuse_what_they_do_not_list():
    with pytest.raises(env.EnvVarError, match="SMOKE_STEPS must be an integer in"):
        env.read("SMOKE_STEPS", {"SMOKE_STEPS": "2.5"})
    assert env.read("SMOKE_STEPS", {"SMOKE_STEPS": " 3 "}) == 3
    assert env.read("SMOKE_ROLLOUT", {"SMOKE_ROLLOUT": "vllm"}) == "vllm"
    with pytest.raises(env.EnvVarError, match="one of hf, vllm, got 'VLLM'"):
        env.read("SMOKE_ROLLOUT", {"SMOKE_ROLLOUT": "VLLM"})


def test_every_variable_the_package_reads_is_in_the_table_and_read_only_there():
    """No module reads one of our variables past the table (os.environ / os.getenv with a literal name), and every
    VERL_EBPO_* / SMOKE_* name the package spells is in it, and in the docs' list."""
    names, direct = set(), []
    for path in (ROOT / "verl_ebpo").rglob("*.py"):
        text = path.read_text()
        names |= set(re.findall(r"\b((?:VERL_EBPO|SMOKE)_[A-Z0-9_]*[A-Z0-9])\b", text))
        if path != ROOT / "verl_ebpo" / "tools" / "env.py":
            direct += [f"{path.name}: {m}" for m in re.findall(
                r"(?:environ\.get|getenv|environ\[)\(?\s*[\"']((?:VERL_EBPO|SMOKE)_\w+)", text)]
    assert direct == []
    assert names <= set(env.VARIABLES), sorted(names - set(env.VARIABLES))
    docs = (ROOT / "docs" / "cpu_backend.md").read_text()
    assert [name for name in env.VARIABLES if f"`{name}`" not in docs] == []


def test_preflight_names_the_hub_timeout_variable_when_refused(monkeypatch):
    from verl_ebpo.tools.preflight import models

    for raw, expected in (("", 10.0), ("0", 0.0), ("2.5", 2.5)):
        monkeypatch.setenv("VERL_EBPO_HUB_TIMEOUT_S", raw)
        assert models.hub_timeout() == expected
    for raw in ("abc", "nan", "-1", "121"):
        monkeypatch.setenv("VERL_EBPO_HUB_TIMEOUT_S", raw)
        with pytest.raises(ValueError, match=f"VERL_EBPO_HUB_TIMEOUT_S must be a number in \\[0, 120\\], got '{raw}'"):
            models.hub_timeout()
