"""Every public function and class of the modules a user imports (the Python API, scenario, load,
scaler, profiles) has a docstring, and a function's docstring names each of its parameters."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "testbed"
USER_MODULES = [ROOT / "api.py", *(p for pkg in ("scenario", "judge", "load", "scaler", "profiles",
                                                  "traces")
                                   for p in sorted((ROOT / pkg).rglob("*.py")))]


def undocumented(path: Path) -> list[str]:
    """`path`'s public functions and classes without a docstring, and functions whose docstring
    leaves a parameter unnamed (self and cls aside)."""
    out: list[str] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for n in getattr(node, "body", []):
            kinds = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
            if not isinstance(n, kinds) or n.name.startswith("_"):
                continue
            doc = ast.get_docstring(n)
            rel = path.relative_to(ROOT.parent) if path.is_relative_to(ROOT.parent) else path.name
            where = f"{rel}:{n.lineno} {prefix}{n.name}"
            if not doc:
                out.append(where)
            elif not isinstance(n, ast.ClassDef):
                args = n.args.posonlyargs + n.args.args + n.args.kwonlyargs
                unnamed = [a.arg for a in args if a.arg not in ("self", "cls")
                           and not re.search(rf"(?<![\w.]){re.escape(a.arg)}(?!\w)", doc)]
                if unnamed:
                    out.append(f"{where} (unnamed: {', '.join(unnamed)})")
            if isinstance(n, ast.ClassDef):
                visit(n, f"{prefix}{n.name}.")

    visit(ast.parse(path.read_text()), "")
    return out


def test_every_public_function_of_the_user_modules_is_documented():
    missing = [m for path in USER_MODULES for m in undocumented(path)]
    assert not missing, "\n".join(missing)


def test_the_check_finds_a_missing_docstring_and_an_unnamed_parameter(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text('def shown(a, b):\n    """Uses a only."""\n\n\nclass Bare:\n    pass\n\n\n'
                       'def near(rate, rates_seen):\n    """rates_seen: the rates so far."""\n')
    found = undocumented(planted)
    # by name: `rate` inside `rates_seen` does not document `rate`
    assert [f.split(" ", 1)[1] for f in found] == ["shown (unnamed: b)", "Bare", "near (unnamed: rate)"]
