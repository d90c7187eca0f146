"""The import structure of DESIGN.md's "Layers": imports point down, two packages never import each
other, and no module imports itself back through others. Function-local imports count too."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "testbed"

# Lower number = lower layer. A package may import packages of its own layer or below, never above.
LAYERS = {
    "errors": 0, "paths": 0, "config": 0, "profiles": 0,
    "net": 1, "ran": 1, "core": 1, "load": 1, "scaler": 1, "cluster": 1, "sim": 1, "metrics": 1,
    "bringup": 2, "lab": 2, "train": 2,
    "scenario": 3,
    "report": 4,
    # reproduce runs scenarios and the simulator and writes a report from their results: it
    # orchestrates what sits below it (scenario, train, report), so it sits above report and
    # below the CLI that only parses and prints
    "reproduce": 5,
    "cli": 6, "pytest_plugin": 6, "__main__": 6,
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """module -> the testbed modules it imports (an imported name that is a module counts as one)."""
    modules = {_module_name(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = defaultdict(set)
    for mod, path in modules.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            graph[mod].update(t for t in targets if t.startswith("testbed") and t in modules and t != mod)
    return graph


def _package(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_package_has_a_layer():
    packages = {_package(m) for m in _imports()} - {"__init__"}
    assert not sorted(packages - set(LAYERS)), "add new packages to LAYERS (and to DESIGN.md's picture)"


def test_imports_point_down():
    upward = sorted(
        f"{mod} -> {target}"
        for mod, targets in _imports().items()
        for target in targets
        if _package(mod) in LAYERS and _package(target) in LAYERS
        and LAYERS[_package(target)] > LAYERS[_package(mod)]
    )
    assert not upward, "imports from a lower layer into a higher one:\n" + "\n".join(upward)


def test_no_two_packages_import_each_other():
    deps: dict[str, set[str]] = defaultdict(set)
    for mod, targets in _imports().items():
        deps[_package(mod)].update(_package(t) for t in targets if _package(t) != _package(mod))
    both = sorted({tuple(sorted((a, b))) for a in deps for b in deps[a] if a in deps.get(b, ())})
    assert not both, f"packages that import each other: {both}"


def test_no_module_cycles():
    graph = _imports()
    # A package's __init__ re-exports its modules; an import of the package from inside it is a
    # real cycle in Python too, so it stays in the graph.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in list(graph):
        if v not in index:
            visit(v)
    assert not cycles, f"modules that import each other (directly or around a loop): {cycles}"


def test_the_checks_catch_a_two_way_dependency(tmp_path):
    """The checks themselves: a planted sim -> scaler -> sim loop is reported."""
    global ROOT
    pkg = tmp_path / "testbed"
    for name, body in {"__init__.py": "", "sim/__init__.py": "", "scaler/__init__.py": "",
                       "sim/a.py": "from testbed.scaler.b import X\n",
                       "scaler/b.py": "X = 1\ndef f():\n    from testbed.sim.a import X\n"}.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(body)
    saved, ROOT = ROOT, pkg
    try:
        for check in (test_no_two_packages_import_each_other, test_no_module_cycles):
            try:
                check()
            except AssertionError as exc:
                assert "sim" in str(exc) and "scaler" in str(exc)
            else:
                raise AssertionError(f"{check.__name__} missed the planted loop")
    finally:
        ROOT = saved
