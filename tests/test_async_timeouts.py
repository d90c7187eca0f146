"""Python 3.10, which the package supports (the load client's hosts run Ubuntu 22.04), raises
asyncio.TimeoutError from asyncio.wait_for and aiohttp, and that is the builtin TimeoutError only
from 3.11 on: a timeout caught around an `await` must name asyncio.TimeoutError too."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _names(node: ast.expr | None) -> set[str]:
    """The exception names an `except` clause or suppress() argument names: X or asyncio.X."""
    items = node.elts if isinstance(node, ast.Tuple) else [node]
    return {ast.unparse(n) for n in items if n is not None}


def _awaits(body: list[ast.stmt]) -> bool:
    return any(isinstance(n, ast.Await | ast.AsyncFor | ast.AsyncWith)
               for stmt in body for n in ast.walk(stmt))


def missing_asyncio_timeout(source: str) -> list[int]:
    """Lines that catch TimeoutError around an await without asyncio.TimeoutError."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        caught: list[tuple[int, set[str]]] = []
        if isinstance(node, ast.Try) and _awaits(node.body):
            caught = [(h.lineno, _names(h.type)) for h in node.handlers]
        elif isinstance(node, ast.With | ast.AsyncWith) and _awaits(node.body):
            caught = [(item.context_expr.lineno, _names(ast.Tuple(elts=item.context_expr.args)))
                      for item in node.items if isinstance(item.context_expr, ast.Call)
                      and ast.unparse(item.context_expr.func).endswith("suppress")]
        lines += [line for line, names in caught
                  if "TimeoutError" in names and "asyncio.TimeoutError" not in names]
    return lines


def test_timeouts_caught_around_awaits_include_asyncio_timeout_error() -> None:
    bad = [f"{path.relative_to(ROOT)}:{line}"
           for path in sorted((ROOT / "testbed").rglob("*.py"))
           for line in missing_asyncio_timeout(path.read_text())]
    assert bad == []


def test_the_check_finds_a_bare_timeout_error_around_an_await() -> None:
    source = """
async def f(ev, p):
    try:
        await asyncio.wait_for(ev.wait(), 1)
    except TimeoutError:
        pass
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(ev.wait(), 1)
    with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
        await asyncio.wait_for(ev.wait(), 1)
    try:
        p.read()  # no await: a socket timeout is the builtin TimeoutError on 3.10 too
    except TimeoutError:
        pass
"""
    assert missing_asyncio_timeout(source) == [5, 7]
