"""The plugin's size rules: no module of verl_ebpo/ outside tools/ over 300 code lines, and 2,500 in all, counted by
benchmarks/count_lines.py (ast + tokenize: blank, comment and docstring lines do not count)."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("count_lines", ROOT / "benchmarks" / "count_lines.py")
count_lines = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(count_lines)


def test_the_counter_skips_blank_comment_and_docstring_lines(tmp_path):
    p = tmp_path / "m.py"
    p.write_text('"""Module doc,\non two lines."""\n\n# a comment\nimport os  # trailing\n\n\ndef f(x):\n'
                 '    """Doc."""\n    return (x +\n            1)\n\n\nclass C:\n    """Doc."""\n    y = """not a doc"""\n')
    assert count_lines.code_lines(p) == 6  # import, def, return (2 lines), class, y


def test_no_plugin_module_is_over_300_code_lines():
    per = count_lines.count()
    assert "advantage/core.py" in per and not any(name.startswith("tools/") for name in per)
    over = {name: n for name, n in per.items() if n > 300}
    assert not over, over


def test_the_plugin_is_at_most_2500_code_lines():
    """The plugin (what verl runs on a cluster: verl_ebpo/ outside tools/) stays small; the tools are counted apart."""
    total = sum(count_lines.count().values())
    assert total <= 2500, f"{total} code lines in verl_ebpo/ outside tools/"
