"""The package's import graph, read from the source with `ast`: no cycle between subpackages
(top-level modules count as their own), none between the modules of one subpackage, and no
import upward through the layers. Every import counts, those inside functions included; the
implicit import of a module's parent packages does not, nor does an import under
`if TYPE_CHECKING:` (it never runs: annotations only, e.g. the engine naming `Method`)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "fairbench"

# Lowest first: a subpackage may import from its own layer or below, never from above.
LAYERS = [
    {"errors", "task", "metrics", "streams"},
    {"privacy", "constraints", "datasets", "models"},
    {"methods"},
    {"rundir", "catalog"},  # catalog: what `describe` shows of methods and datasets
    {"runner", "report", "audit"},
    {"workflows", "figures"},  # figures: the paper figures' registry, built by report
    {"cli", "api", "testing"},  # api: the Python API (fairbench.run); testing: the plugin
    # conformance kit, over methods, datasets, runner
]
# Siblings on a layer that must stay independent of each other.
INDEPENDENT = {"runner", "report", "audit"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _exists(name: str) -> bool:
    path = ROOT.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _targets(node: ast.AST, package: str) -> list[str]:
    """The fairbench modules one import statement names (`from fairbench.x import y` names
    fairbench.x.y when y is a module, else fairbench.x)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "fairbench"]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:  # relative: resolve against the importing package
        base = package.split(".")[: len(package.split(".")) - node.level + 1]
        module = ".".join(base + ([node.module] if node.module else []))
    else:
        module = node.module or ""
    if module.split(".")[0] != "fairbench":
        return []
    return [f"{module}.{a.name}" if _exists(f"{module}.{a.name}") else module for a in node.names]


def _without_type_checking(tree: ast.Module) -> ast.Module:
    """The module without its `if TYPE_CHECKING:` blocks."""
    tree.body = [
        node
        for node in tree.body
        if not (isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    ]
    return tree


def module_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """fairbench module -> the fairbench modules it imports anywhere in its source."""
    graph: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        name = _module_name(path)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = _without_type_checking(ast.parse(path.read_text(), str(path)))
        graph[name] = {t for n in ast.walk(tree) for t in _targets(n, package)} - {name}
    return graph


def _node(module: str) -> str | None:
    """The subpackage (or top-level module) a module belongs to; None for the root."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def subpackage_graph(modules: dict[str, set[str]]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, imported in modules.items():
        source = _node(module)
        if source is None:
            continue
        targets = {_node(t) for t in imported} - {source, None}
        graph.setdefault(source, set()).update(targets)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path [a, b, ..., a], or None (depth-first search)."""
    state: dict[str, int] = {}  # 1 on the current path, 2 finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


@pytest.fixture(scope="module")
def modules() -> dict[str, set[str]]:
    return module_graph()


def test_no_cycle_between_subpackages(modules):
    cycle = find_cycle(subpackage_graph(modules))
    assert cycle is None, "import cycle between subpackages: " + " -> ".join(cycle)


def test_no_cycle_within_a_subpackage(modules):
    for package in sorted({_node(m) for m in modules} - {None}):
        inner = {
            m: {t for t in ts if _node(t) == package}
            for m, ts in modules.items()
            if _node(m) == package
        }
        cycle = find_cycle(inner)
        assert cycle is None, f"import cycle within {package}: " + " -> ".join(cycle)


def test_imports_never_go_up_a_layer(modules):
    layer = {name: i for i, names in enumerate(LAYERS) for name in names}
    graph = subpackage_graph(modules)
    assert set(graph) <= set(layer), f"place {sorted(set(graph) - set(layer))} in LAYERS"
    upward = [
        f"{a} -> {b}"
        for a, bs in sorted(graph.items())
        for b in sorted(bs)
        if layer[b] > layer[a] or (a in INDEPENDENT and b in INDEPENDENT)
    ]
    assert not upward, "imports against the layers: " + ", ".join(upward)


def test_the_checks_catch_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    tree = ast.parse("def f():\n    from fairbench.runner.trial import TrialSpec\n")
    assert [t for n in ast.walk(tree) for t in _targets(n, "fairbench.x")] == [
        "fairbench.runner.trial"
    ]
