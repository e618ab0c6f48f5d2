"""No logic written twice, once for each backend: the embedded engine
(rstreams/runtime/engine, rstreams/testing.py, rstreams/runner.py) and Spark
(rstreams/runtime/spark) share no run of six statements of the same shape. Shared logic
lives below both (rstreams.semantics, rstreams.userfn, rstreams.runtime.*), where
either may import it (see test_layers.py).

The check reads the source as tokens: each logical line with its names, strings and
numbers folded (``self._fail(step, rows, i)`` and ``ctx.fail(step, batch, j)`` are
alike), leaving out docstrings, comments, imports, signatures, decorators, lines of one
or two tokens (``try:``, ``else:``) and the lines that say nothing about logic
(``self.x = x``, ``NAME = "literal"``, a bare field annotation). A run of six of the
remaining lines standing in both trees is reported with where it stands.

Run this file as a script to print the runs found.
"""

from __future__ import annotations

import ast
import io
import keyword
import tokenize
from pathlib import Path

import rstreams

PACKAGE = Path(rstreams.__file__).resolve().parent
RUN = 6

_SKIPPED_STARTS = ("import ", "from ", "def ", "async def ", "class ", "@")
_SAY_NOTHING = {"N = N", "N . N = N", "return N", "N = S", "N = 0", "N : N", "N : N = S"}


def _docstring_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def shapes(path: Path) -> list[tuple[int, str]]:
    """(line number, shape) of each logical line of ``path`` that counts."""
    source = path.read_text(encoding="utf-8")
    docstrings = _docstring_lines(ast.parse(source))
    out: list[tuple[int, str]] = []
    words: list[str] = []
    start = 0
    ignored = {tokenize.COMMENT, tokenize.NL, tokenize.INDENT, tokenize.DEDENT}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in ignored or tok.type == tokenize.ENDMARKER:
            continue
        if tok.type == tokenize.NEWLINE:
            line = " ".join(words)
            if (
                words
                and start not in docstrings
                and len(words) > 2
                and not line.startswith(_SKIPPED_STARTS)
                and line not in _SAY_NOTHING
            ):
                out.append((start, line))
            words = []
            continue
        if not words:
            start = tok.start[0]
        if tok.type == tokenize.NAME and not keyword.iskeyword(tok.string):
            words.append("N")
        elif tok.type in (tokenize.STRING, tokenize.NUMBER):
            words.append("S" if tok.type == tokenize.STRING else "0")
        else:
            words.append(tok.string)
    return out


def runs(paths: list[Path]) -> dict[tuple[str, ...], str]:
    """Every run of ``RUN`` consecutive counted lines -> where it first stands."""
    found: dict[tuple[str, ...], str] = {}
    for path in paths:
        for line, run in _windows(shapes(path)):
            found.setdefault(run, f"{path.relative_to(PACKAGE).as_posix()}:{line}")
    return found


def _windows(lines: list[tuple[int, str]]) -> list[tuple[int, tuple[str, ...]]]:
    return [
        (lines[i][0], tuple(shape for _, shape in lines[i : i + RUN]))
        for i in range(len(lines) - RUN + 1)
    ]


def shared_runs() -> list[tuple[str, str, tuple[str, ...]]]:
    engine = [
        *sorted((PACKAGE / "runtime" / "engine").rglob("*.py")),
        PACKAGE / "testing.py",
        PACKAGE / "runner.py",
    ]
    spark = sorted((PACKAGE / "runtime" / "spark").rglob("*.py"))
    a, b = runs(engine), runs(spark)
    return sorted((a[run], b[run], run) for run in a.keys() & b.keys())


def test_the_engine_and_spark_share_no_logic_written_twice() -> None:
    found = shared_runs()
    assert not found, "move the shared logic below both backends:\n" + "\n".join(
        f"  {a} ~ {b}" for a, b, _ in found
    )


def test_the_check_sees_a_copy_with_other_names() -> None:
    lines = [
        "try:\n    return list(map(fn, xs)), xs\nexcept Exception:\n    pass\n"
        "out: list[Any] = []\nkeep: list[int] = []\nfor i, v in enumerate(xs):\n"
        "    try:\n        out.append(fn(v))\n    except Exception as e:\n"
        f"        {fail}(i, e)\n        continue\n    keep.append(i)\n"
        for fail in ("self._fail", "ctx.handle_error")
    ]
    a, b = ({run for _, run in _windows(_shapes_of(text))} for text in lines)
    assert a & b  # (the same code with another failure call: one run of six in common)


def _shapes_of(text: str) -> list[tuple[int, str]]:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "x.py"
        path.write_text(text, encoding="utf-8")
        return shapes(path)


if __name__ == "__main__":
    for a, b, run in shared_runs():
        print(f"{a} ~ {b}")
        print("   ", "\n    ".join(run))
