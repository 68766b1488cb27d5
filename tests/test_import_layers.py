"""The package's imports go one way: no circles, and no lower stage imports an upper one.

Read from the source with `ast` (nothing is imported), every import counts, at module level or
inside a function, except those under `if TYPE_CHECKING:` (annotations only, never run). The
stage order is STAGES below: a module belongs to the first entry that names it or a package
above it, and may import only modules of its own stage or a lower one."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "tinytrain"

# lowest first: what each stage may build on is everything above it in this list
STAGES: tuple[tuple[str, ...], ...] = (
    ("tinytrain.errors", "tinytrain.version", "tinytrain.assets"),
    ("tinytrain.boards", "tinytrain.quant"),  # board data; fixed-point arithmetic
    ("tinytrain.ir",),  # the graph every stage speaks
    ("tinytrain.ops",),  # 2. one op per file, the registry, the interpreter
    ("tinytrain.frontend",),  # 1. ONNX and TFLite importers (they build graphs of ops)
    ("tinytrain.passes",),  # 3. the passes, and pipeline.py, their driver
    ("tinytrain.codegen",),  # 4. C from templates, program.json, output directories
    ("tinytrain.reports",),  # 5. what a build reports
    ("tinytrain.device",),  # 6. toolchain, build driver, twins, link, flashing, training
    ("tinytrain.export",),  # 7. ONNX, TFLite and the C library
    ("tinytrain.autoplan",),  # 8. --update auto: builds and trains candidate plans
    ("tinytrain.fleet",),  # 9. federated rounds over many devices (Flower drives them)
    ("tinytrain.cli", "tinytrain.__main__", "tinytrain"),  # 10. the command line, the API
)


def _modules() -> dict[str, Path]:
    out = {}
    for p in PACKAGE.rglob("*.py"):
        parts = list(p.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = p
    return out


def _type_checking(node: ast.AST) -> bool:
    t = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING")
        or (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"))


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that `name` imports."""
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if _type_checking(node):
            for child in getattr(node, "orelse", []):
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[:len(pkg.split(".")) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            for a in node.names:  # `from pkg import module` imports the module
                full = f"{base}.{a.name}"
                found.add(full if full in modules else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return {m for m in found if m in modules and m != name}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {m: _imports(m, p, modules) for m, p in modules.items()}


def stage(module: str) -> int:
    best = None
    for k, names in enumerate(STAGES):
        for n in names:
            if module == n or module.startswith(n + "."):
                if best is None or len(n) > best[1]:
                    best = (k, len(n))
    assert best is not None, f"{module} is in no stage: add it to STAGES"
    return best[0]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return out


def test_no_import_circles():
    assert _cycles(_graph()) == []


def test_no_stage_imports_an_upper_one():
    graph = _graph()
    bad = sorted(f"{m} (stage {stage(m)}) imports {d} (stage {stage(d)})"
                 for m, deps in graph.items() for d in deps if stage(d) > stage(m))
    assert bad == []


def test_the_checks_catch_what_they_look_for(tmp_path):
    """The walker sees function-level and relative imports and skips TYPE_CHECKING ones."""
    mods = {"tinytrain.a": tmp_path / "a.py", "tinytrain.b": tmp_path / "b.py",
            "tinytrain.c": tmp_path / "c.py"}
    mods["tinytrain.a"].write_text("def f():\n    from . import b\n")
    mods["tinytrain.b"].write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                   "    from tinytrain import c\nimport tinytrain.a\n")
    mods["tinytrain.c"].write_text("x = 1\n")
    graph = {m: _imports(m, p, mods) for m, p in mods.items()}
    assert graph == {"tinytrain.a": {"tinytrain.b"}, "tinytrain.b": {"tinytrain.a"},
                     "tinytrain.c": set()}
    assert _cycles(graph) == [["tinytrain.a", "tinytrain.b"]]
    assert stage("tinytrain.ops.conv2d") < stage("tinytrain.passes.remat") < stage(
        "tinytrain.autoplan.search")
