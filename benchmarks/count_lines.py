"""Count code lines: lines holding a token that is not a comment, a docstring, or layout (blank lines,
NEWLINE/INDENT tokens). Issue 47's measure, per part of the project: the plugin (verl_ebpo/ outside tools/),
the tools (verl_ebpo/tools/), the recipes' Python and the benchmarks, and the total.

Usage: python benchmarks/count_lines.py [--all]   (--all also lists every module)
"""
import ast
import io
import sys
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LAYOUT = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
          tokenize.ENCODING, tokenize.ENDMARKER}


def docstring_lines(tree: ast.AST) -> set[int]:
    """Line numbers covered by module, class and function docstrings."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                out.update(range(body[0].lineno, body[0].end_lineno + 1))
    return out


def code_lines(path: Path) -> int:
    """Number of lines of `path` that carry code."""
    src = Path(path).read_text()
    skip = docstring_lines(ast.parse(src))
    lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type in LAYOUT:
            continue
        lines.update(n for n in range(tok.start[0], tok.end[0] + 1) if n not in skip)
    return len(lines)


def count(repo: Path = REPO) -> dict[str, dict[str, int]]:
    """{part: {module path relative to the repository: code lines}} for plugin, tools, recipes, benchmarks."""
    package = repo / "verl_ebpo"
    parts = {"plugin": [p for p in package.rglob("*.py") if "tools" not in p.relative_to(package).parts],
             "tools": list((package / "tools").rglob("*.py")),
             "recipes": list((repo / "recipes").rglob("*.py")),
             "benchmarks": list((repo / "benchmarks").rglob("*.py"))}
    return {part: {str(p.relative_to(repo)): code_lines(p) for p in sorted(files)} for part, files in parts.items()}


def main() -> None:
    parts = count()
    for part, modules in parts.items():
        if "--all" in sys.argv:
            for name, n in sorted(modules.items(), key=lambda kv: -kv[1]):
                print(f"{n:6d}  {name}")
        print(f"{sum(modules.values()):6d}  {part} (largest module: {max(modules.values(), default=0)})")
    print(f"{sum(sum(m.values()) for m in parts.values()):6d}  total")


if __name__ == "__main__":
    main()
