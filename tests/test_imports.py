"""The package's import graph (every `import` of an rlsolve module, at any depth in a file,
read with ast): no circles, no import from a lower layer up to a higher one, the CLI and the
service never import each other, and package __init__ files only re-export."""
from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "rlsolve"

# Lower to higher; a module may import its own layer or lower ones. Components of the top
# layer (the two shells) may not import each other.
LAYERS: list[set[str]] = [
    {"rlsolve.errors", "rlsolve.reader", "rlsolve.writer"},  # reader/writer: every input and output file, below the catalogs
    {"rlsolve.hardware_db", "rlsolve.models", "rlsolve.plan", "rlsolve.runlogs",  # runlogs: log readers only
     "rlsolve.frameworks",  # the framework capability catalog and its rules, which the spec checks a target by
     "rlsolve.linear", "rlsolve.workload"},  # the user's linear constraints; the step's derived quantities
    {"rlsolve.spec", "rlsolve.resolve"},
    {"rlsolve.perf"},
    {"rlsolve.solver"},
    {"rlsolve"},  # the public API: rlsolve.solve, rlsolve.estimate, rlsolve.load_spec
    {"rlsolve.baseline", "rlsolve.cases", "rlsolve.export", "rlsolve.bench", "rlsolve.whatif", "rlsolve.present",
     "rlsolve.logfit"},
    {"rlsolve.cli", "rlsolve.service"},
]
SHELLS = {"rlsolve.cli", "rlsolve.service"}

# Import circles allowed: none (spec -> resolve is one-way since the solver rework; resolve
# names the spec's types for type checking only).
KNOWN_CIRCLES: list[set[str]] = []

# __init__ files that define a function: the package's lazy re-exports (PEP 562 __getattr__,
# so `rlsolve --help` loads neither the schema nor the solver).
INIT_WITH_CODE = {"rlsolve/__init__.py"}


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def import_graph() -> dict[str, set[str]]:
    mods = modules()

    def known(name: str) -> str | None:  # the module a dotted name lives in
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str | None] = set()
        tree = ast.parse(path.read_text(), str(path))
        for block in [n for n in ast.walk(tree) if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"]:
            block.body = []  # imports for type checkers only never run
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets |= {known(a.name) for a in node.names if a.name.split(".")[0] == "rlsolve"}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                if base.split(".")[0] != "rlsolve":
                    continue
                for a in node.names:  # `from pkg import submodule` is an import of the submodule
                    targets.add(f"{base}.{a.name}" if f"{base}.{a.name}" in mods else known(base))
        graph[name] = {t for t in targets if t and t != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def component(module: str) -> str:
    """rlsolve.whatif.figures -> rlsolve.whatif; rlsolve -> rlsolve."""
    return ".".join(module.split(".")[:2])


def layer(module: str) -> int:
    comp = component(module)
    return next(i for i, members in enumerate(LAYERS) if comp in members)


def test_every_module_has_a_layer():
    assert [m for m in modules() if not any(component(m) in s for s in LAYERS)] == []


def test_no_import_circles_but_the_known_ones():
    found = circles(import_graph())
    unknown = [c for c in found if c not in KNOWN_CIRCLES]
    assert unknown == [], f"import circles: {unknown}"


def test_no_import_goes_up_a_layer_and_the_shells_stay_apart():
    graph = import_graph()
    upward = sorted((m, t) for m, ts in graph.items() for t in ts if layer(t) > layer(m))
    assert upward == []
    crossing = sorted((m, t) for m, ts in graph.items() for t in ts
                      if component(m) in SHELLS and component(t) in SHELLS and component(m) != component(t))
    assert crossing == []


def test_the_checker_sees_what_it_must():
    """The rules above catch a circle and a shell-to-shell import (no vacuous pass)."""
    graph = import_graph()
    assert "rlsolve.present" in graph["rlsolve.service.worker"]          # from-import of a module
    assert "rlsolve.whatif.figdata" in graph["rlsolve.whatif.figures"]
    assert "rlsolve.solver" in graph["rlsolve.cli.main"]                 # an import inside a function
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]


def test_package_inits_only_re_export():
    offenders = []
    for path in sorted(PACKAGE.rglob("__init__.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in INIT_WITH_CODE:
            continue
        for node in ast.parse(path.read_text()).body:
            docstring = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            reexport = isinstance(node, (ast.Import, ast.ImportFrom))
            names = isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) and t.id in ("__all__", "__version__")
                                                          for t in node.targets)
            if not (docstring or reexport or names):
                offenders.append(f"{rel}:{node.lineno}")
    assert offenders == []
