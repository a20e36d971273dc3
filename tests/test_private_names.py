"""No module outside `openreward_rl._compat` names a private module or attribute of another library.

Parsed with `ast`, every module of `src/openreward_rl` but those of `_compat/` may not:
1. import a private module of another library, or a private name from one (`import a._b`, `from a._b import c`,
   `from a import _b`);
2. read or write a private attribute of a name bound by an import of another library (`sdk_http._parse_sse_events`);
3. in a class with another library's class as a base, define a method over a private one of that base (an
   override of its private hook), or reach a private member of the base through `self` or `super()` (class
   attributes, and the instance attributes the base's own source assigns as `self._x`);
4. read or write `x._name` on any other object when `_name` is no attribute the package itself defines (in a
   class body, or as `self._name` / `cls._name`), outside `_compat/`;
5. name such an attribute to `getattr`, `setattr`, `hasattr`, `delattr` or a method of `vars(x)`.
A private name is one with a leading underscore that is not a dunder.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[1] / "src" / "openreward_rl"
OWN = "openreward_rl"
REFLECTION = ("getattr", "setattr", "hasattr", "delattr")


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def foreign(module: str) -> bool:
    return module.split(".")[0] != OWN


def bindings(tree: ast.Module) -> dict[str, str]:
    """Each name an import binds anywhere in the module -> the dotted name it stands for."""
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound[alias.asname or alias.name.split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0]
                )
        elif isinstance(node, ast.ImportFrom):
            module = node.module if node.level == 0 and node.module else OWN
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{module}.{alias.name}"
    return bound


def resolve(dotted: str) -> object | None:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for part in parts[cut:]:
                found = getattr(found, part)
        except AttributeError:
            return None
        return found
    return None


def dotted_name(expression: ast.expr, bound: dict[str, str]) -> str | None:
    chain: list[str] = []
    while isinstance(expression, ast.Attribute):
        chain.append(expression.attr)
        expression = expression.value
    if isinstance(expression, ast.Name) and expression.id in bound:
        return ".".join([bound[expression.id], *reversed(chain)])
    return None


_SELF_STORE = re.compile(r"\bself\.(_[A-Za-z0-9_]+)\s*(?::[^=\n]*)?=(?!=)")


def private_members(base: type) -> set[str]:
    """A foreign class's private members: its (inherited) class attributes, and what its classes' source assigns to `self._x`."""
    names = {name for name in dir(base) if private(name)}
    for klass in base.__mro__:
        if klass.__module__.split(".")[0] in (OWN, "builtins"):
            continue
        try:
            names.update(_SELF_STORE.findall(inspect.getsource(klass)))
        except (OSError, TypeError):
            pass
    return names


def foreign_bases(node: ast.ClassDef, bound: dict[str, str]) -> set[str]:
    """The private members of the class's bases that come from another library."""
    members: set[str] = set()
    for base in node.bases:
        dotted = dotted_name(base, bound)
        if dotted and foreign(dotted):
            found = resolve(dotted)
            if isinstance(found, type):
                members |= private_members(found)
    return members


def own_attributes(trees: list[ast.Module]) -> set[str]:
    """The private attribute names the package defines itself: in class bodies, and as `self._x` / `cls._x`."""
    names: set[str] = set()
    for tree in trees:
        bound = bindings(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            theirs = foreign_bases(node, bound)
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    names.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names.add(item.target.id)
                elif isinstance(item, ast.Assign):
                    names.update(target.id for target in item.targets if isinstance(target, ast.Name))
            for inner in ast.walk(node):
                if (
                    isinstance(inner, ast.Attribute)
                    and isinstance(inner.ctx, ast.Store)
                    and isinstance(inner.value, ast.Name)
                    and inner.value.id in ("self", "cls")
                ):
                    names.add(inner.attr)
            names -= theirs
    return {name for name in names if private(name)}


def findings(tree: ast.Module, own: set[str]) -> list[str]:
    """Each reach into another library's private names in `tree` (see the module), as 'line: what'."""
    bound = bindings(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [
                f"{node.lineno}: imports {alias.name}"
                for alias in node.names
                if foreign(alias.name) and any(map(private, alias.name.split(".")))
            ]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and foreign(node.module):
            if any(map(private, node.module.split("."))):
                found.append(f"{node.lineno}: imports from {node.module}")
            found += [
                f"{node.lineno}: imports {node.module}.{alias.name}" for alias in node.names if private(alias.name)
            ]

    def visit(parent: ast.AST, theirs: set[str]) -> None:
        for node in ast.iter_child_nodes(parent):
            if isinstance(node, ast.ClassDef):
                members = foreign_bases(node, bound)
                found.extend(
                    f"{item.lineno}: {node.name} overrides {item.name} of its base"
                    for item in node.body
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name in members
                )
                visit(node, members)
                continue
            if isinstance(node, ast.Attribute) and private(node.attr):
                base = node.value
                through_self = (isinstance(base, ast.Name) and base.id in ("self", "cls")) or (
                    isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id == "super"
                )
                if isinstance(base, ast.Name) and base.id in bound:
                    if foreign(bound[base.id]):
                        found.append(f"{node.lineno}: {base.id}.{node.attr} of {bound[base.id]}")
                elif through_self:
                    if node.attr in theirs:
                        found.append(f"{node.lineno}: {node.attr} of a base from another library")
                elif node.attr not in own:
                    found.append(f"{node.lineno}: .{node.attr}, no attribute of the package")
            elif isinstance(node, ast.Call):
                reflective = isinstance(node.func, ast.Name) and node.func.id in REFLECTION
                on_vars = (
                    isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Call)
                    and isinstance(node.func.value.func, ast.Name)
                    and node.func.value.func.id == "vars"
                )
                if reflective or on_vars:
                    found.extend(
                        f"{node.lineno}: names {arg.value!r}, no attribute of the package"
                        for arg in node.args
                        if isinstance(arg, ast.Constant)
                        and isinstance(arg.value, str)
                        and private(arg.value)
                        and arg.value not in own
                    )
            visit(node, theirs)

    visit(tree, set())
    return found


def package_findings(source: Path) -> dict[str, list[str]]:
    """`findings` of every module under `source` (an `openreward_rl` tree) outside `_compat/`, by path."""
    paths = sorted(path for path in source.rglob("*.py") if "_compat" not in path.relative_to(source).parts)
    trees = {path: ast.parse(path.read_text()) for path in paths}
    own = own_attributes(list(trees.values()))
    return {str(path.relative_to(source)): found for path, tree in trees.items() if (found := findings(tree, own))}


def test_no_module_outside_compat_names_another_librarys_private_names() -> None:
    assert package_findings(SOURCE) == {}


def test_compat_is_a_package() -> None:
    assert (SOURCE / "_compat" / "__init__.py").is_file()


SAMPLES = {
    "import openreward.api._session.http as sdk_http": ["1: imports openreward.api._session.http"],
    "from openreward.api._session.ping import ErrorResponse": ["1: imports from openreward.api._session.ping"],
    "from aiohttp import _helpers": ["1: imports aiohttp._helpers"],
    "import aiohttp\naiohttp._private = 1": ["2: aiohttp._private of aiohttp"],
    "def f(session):\n    session._mark_dead(None)": ["2: ._mark_dead, no attribute of the package"],
    "def f(session):\n    return getattr(session, '_ping_task', None)": [
        "2: names '_ping_task', no attribute of the package"
    ],
    "def f(model):\n    vars(model).pop('_cached_manager', None)": [
        "2: names '_cached_manager', no attribute of the package"
    ],
    (
        "from openreward.api.environments.client import AsyncEnvironmentsAPI\n"
        "class Pooled(AsyncEnvironmentsAPI):\n"
        "    def _get_connector(self):\n"
        "        return self._connector"
    ): ["3: Pooled overrides _get_connector of its base", "4: _connector of a base from another library"],
    "class Mine:\n    def __init__(self):\n        self._own = 1\n    def read(self, other):\n        return other._own": [],
    "import json\njson.__name__": [],
}


@pytest.mark.parametrize("source", SAMPLES)
def test_the_rule_finds_each_kind_of_reach(source: str) -> None:
    tree = ast.parse(source)
    assert sorted(findings(tree, own_attributes([tree]))) == sorted(SAMPLES[source])
