"""The import structure of DESIGN.md's "Layers": imports point down, two packages never import each
other, and no module imports itself back through others. Function-local imports count too."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "testbed"

# Lower number = lower layer. A package may import packages of its own layer or below, never above;
# each package sits exactly one above the highest package it imports, so the numbers say how the
# packages really stand (test_the_layers_are_as_the_imports_stand).
LAYERS = {
    "errors": 0, "paths": 0,
    "timer": 0,  # a wake-up at a loop time to the microsecond (the load client, the replicas)
    "clock": 0,  # a run's time scale: scenario and wall time, what a latency compresses
    "judge": 0,  # the expect: language, its statistics, outcomes, power and the run's verdict: rows only
    "plugins": 1,  # module:attr references and entry points (imports errors only)
    "config": 1,
    "traces": 1,  # the paper's traces, shipped as package data (imports errors only)
    "profiles": 2, "net": 2,
    "metrics": 3, "core": 3,
    "ran": 4, "cluster": 4,
    "load": 5, "scaler": 5,
    "sim": 6, "bringup": 6, "lab": 6,
    "train": 7,
    "scenario": 8,
    "report": 9,
    "web": 9,  # the live page: tails a run directory while it runs, reads it only, as report does
    # reproduce runs scenarios and the simulator and writes a report from their results: it
    # orchestrates what sits below it (scenario, train, report), below the CLI that only parses
    # and prints
    "reproduce": 10,
    "api": 10,  # the Python API: loads and runs scenarios, reads results, evaluates on the simulator
    "pytest_plugin": 10,
    "cli": 11, "__main__": 12,
}
# The CLI imports the library inside each command so that `testbed --help`, `status` and `down`
# start within 8x of `python3 -c pass` (bench/startup.py, tests/cli/test_startup.py): its
# function-local imports need no comment each.
LATE_IMPORTS_EXPLAINED_ONCE = ("cli",)


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """module -> the testbed modules it imports (an imported name that is a module counts as one)."""
    if ROOT not in _PARSED:  # every test asks, some many times: each tree is parsed once
        _PARSED[ROOT] = _parse_imports()
    return _PARSED[ROOT]


_PARSED: dict[Path, dict[str, set[str]]] = {}


def _parse_imports() -> dict[str, set[str]]:
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


def _package_deps() -> dict[str, set[str]]:
    deps: dict[str, set[str]] = defaultdict(set)
    for mod, targets in _imports().items():
        deps[_package(mod)].update(_package(t) for t in targets if _package(t) != _package(mod))
    return deps


def test_the_layers_are_as_the_imports_stand():
    """Each package is one layer above the highest package it imports (0 for none): a new import
    that lifts a package, or one that goes away, shows here and in DESIGN.md's picture."""
    deps = _package_deps()
    wrong = {p: (LAYERS[p], 1 + max((LAYERS[d] for d in deps.get(p, ())), default=-1))
             for p in LAYERS if p in {_package(m) for m in _imports()} | set(deps)}
    wrong = {p: f"LAYERS says {have}, its imports put it at {want}"
             for p, (have, want) in wrong.items() if have != want}
    assert not wrong, wrong


def _late_imports() -> list[str]:
    """The project's own modules imported inside a function with no comment on that line or the
    three above it saying why."""
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        mod = _module_name(path)
        if _package(mod) in LATE_IMPORTS_EXPLAINED_ONCE:
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        for fn in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Import | ast.ImportFrom):
                    name = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
                    i = node.lineno - 1
                    if (name or "").startswith("testbed") and not any(
                            "#" in line for line in lines[max(i - 3, 0):i + 1]):
                        out.append(f"{mod}:{node.lineno}: {lines[i].strip()}")
    return sorted(set(out))


def test_the_projects_modules_are_imported_at_the_top_unless_a_comment_says_why():
    late = _late_imports()
    assert not late, ("import these at the top of the module, or say in a comment why not:\n"
                      + "\n".join(late))


def test_the_late_import_check_sees_a_bare_one_and_a_commented_one(tmp_path):
    global ROOT
    pkg = tmp_path / "testbed"
    (pkg / "sim").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sim" / "__init__.py").write_text("")
    (pkg / "sim" / "a.py").write_text(
        "def f():\n    from testbed.sim import b\n\n\n"
        "def g():\n    # torch: only when training\n    from testbed.sim import c\n")
    saved, ROOT = ROOT, pkg
    try:
        assert _late_imports() == ["testbed.sim.a:2: from testbed.sim import b"]
    finally:
        ROOT = saved
