"""The house's size limits (issue 55): a module someone can read in one sitting, a function on
one screen outside the command line, and long parameter lists kept to a few."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "testbed"
MODULE_LINES = 450
FUNCTION_LINES = 60  # outside testbed/cli, whose typer commands list their options
PARAMETERS = 8  # self and cls not counted
# outside testbed/cli too: a typer command's parameters are its options, one per flag
MANY_PARAMETER_FUNCTIONS = 10


def _functions():
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield path.relative_to(ROOT), node


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = node.args
    names = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    return len([n for n in names if n not in ("self", "cls")])


def test_no_module_is_over_450_lines():
    long = {str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MODULE_LINES}
    assert long == {}


def test_no_function_outside_the_cli_is_over_60_lines():
    long = [f"{path}:{f.lineno} {f.name} ({f.end_lineno - f.lineno + 1} lines)"
            for path, f in _functions()
            if "cli" not in path.parts and f.end_lineno - f.lineno + 1 > FUNCTION_LINES]
    assert long == []


def test_at_most_ten_functions_outside_the_cli_take_more_than_8_parameters():
    many = [f"{path}:{f.lineno} {f.name} ({_parameters(f)})" for path, f in _functions()
            if "cli" not in path.parts and _parameters(f) > PARAMETERS]
    assert len(many) <= MANY_PARAMETER_FUNCTIONS, "\n".join(many)
