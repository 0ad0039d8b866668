"""Count code lines of verl_ebpo/ outside tools/: lines holding a token that is not a comment,
a docstring, or layout (blank lines, NEWLINE/INDENT tokens). Issue 40's measure.

Usage: python benchmarks/count_lines.py [--all]   (--all also lists every module)
"""
import ast
import io
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "verl_ebpo"
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
    src = path.read_text()
    skip = docstring_lines(ast.parse(src))
    lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type in LAYOUT:
            continue
        lines.update(n for n in range(tok.start[0], tok.end[0] + 1) if n not in skip)
    return len(lines)


def count(root: Path = ROOT) -> dict[str, int]:
    """{relative module path: code lines} for every module outside tools/."""
    return {str(p.relative_to(root)): code_lines(p) for p in sorted(root.rglob("*.py"))
            if "tools" not in p.relative_to(root).parts}


def main() -> None:
    per = count()
    folders: dict[str, int] = {}
    for name, n in per.items():
        folder = name.rsplit("/", 1)[0] if "/" in name else "."
        folders[folder] = folders.get(folder, 0) + n
    if "--all" in sys.argv:
        for name, n in sorted(per.items(), key=lambda kv: -kv[1]):
            print(f"{n:6d}  {name}")
    for folder, n in sorted(folders.items()):
        print(f"{n:6d}  {folder}/")
    print(f"{sum(per.values()):6d}  total (largest module: {max(per.values())})")


if __name__ == "__main__":
    main()
