"""The package's import graph: no circle between modules (imports inside functions and type-only imports
under `if TYPE_CHECKING:` included), and every import between packages points down the layers below,
never back up."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[1] / "src" / "openreward_rl"

# Lowest first. A module may import its own package's modules and any package of a lower layer.
LAYERS: list[set[str]] = [
    {"_lazy", "_registry", "errors", "_options", "_limits"},
    {"_compat"},  # every touch of another library's private names (tests/test_private_names.py)
    {"redaction", "retry", "assets", "task"},  # task: the one task identity, named by every layer above
    {"parsers", "reducers"},
    {"families"},  # names its parser: imports parsers
    {"config", "engines"},
    {"env"},
    {"loop"},
    {"observe", "preflight", "credit", "agent_endpoint"},
    {"show", "backends"},
    {"cli", "testing"},
    {""},  # the root package's lazy exports
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SOURCE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def unit(module: str) -> str:
    """The layer unit of `module`: its first component below `openreward_rl` ("" for the root)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def imports_of(path: Path, known: set[str]) -> set[str]:
    """Every module of the package `path` imports, at run time or for type checking only."""
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("openreward_rl"):
                found.add(node.module)
                found.update(
                    f"{node.module}.{alias.name}" for alias in node.names if f"{node.module}.{alias.name}" in known
                )
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names if alias.name.startswith("openreward_rl"))
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.stmt):
                    visit([child])

    visit(ast.parse(path.read_text()).body)
    return {name for name in found if name in known}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in SOURCE.rglob("*.py")}
    known = set(paths)
    return {name: imports_of(path, known) - {name} for name, path in paths.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def strong(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                strong(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            strong(node)
    return found


def test_no_import_circle(graph: dict[str, set[str]]) -> None:
    assert cycles(graph) == []


def test_every_package_has_a_layer(graph: dict[str, set[str]]) -> None:
    placed = set().union(*LAYERS)
    assert {unit(name) for name in graph} <= placed


def test_imports_point_down_the_layers(graph: dict[str, set[str]]) -> None:
    rank = {name: level for level, names in enumerate(LAYERS) for name in names}
    upward = [
        f"{source} -> {target}"
        for source, targets in sorted(graph.items())
        for target in sorted(targets)
        if unit(source) != unit(target) and rank[unit(target)] >= rank[unit(source)]
    ]
    assert upward == []


# The hook faces a trainer flag (or TRL user) names, the private plumbing they share, and one deprecated alias.
BACKENDS = {
    "advantages",
    "filters",
    "miles",
    "miles_agent",
    "rollout_log",
    "slime",
    "task_sampling",
    "trl",
    "_sample",
    "fork_normalization",  # deprecated alias of advantages.slime_episode_post_process, for one release
}


def test_backends_holds_only_trainer_glue() -> None:
    """`backends/` keeps the hook faces at their public paths; code that knows no trainer lives below it."""
    names = {
        p.stem if p.suffix == ".py" else p.name
        for p in (SOURCE / "backends").iterdir()
        if p.name not in ("__init__.py", "__pycache__")
    }
    assert names == BACKENDS


def test_sample_plumbing_is_private_to_backends(graph: dict[str, set[str]]) -> None:
    """`backends._sample` is imported by the hooks only, never from another package."""
    outside = sorted(
        f"{source} -> {target}"
        for source, targets in graph.items()
        for target in targets
        if target.startswith("openreward_rl.backends._sample") and not source.startswith("openreward_rl.backends")
    )
    assert outside == []


def test_type_only_imports_are_in_the_graph(tmp_path: Path) -> None:
    """A circle closed by an import under `if TYPE_CHECKING:` is still a circle (families.base <-> families.chat was one)."""
    path = tmp_path / "a.py"
    path.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from openreward_rl.b import B\n")
    assert imports_of(path, {"openreward_rl.b"}) == {"openreward_rl.b"}


def test_the_cycle_finder_finds_a_circle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
