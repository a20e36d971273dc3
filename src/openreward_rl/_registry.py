"""`Registry`: names -> classes (or factories); the one way a user's extension is named.

Every extension point that a config or a command line names (a tool parser, a reward reducer, an
episode, a context policy, a model family) is looked up by `Registry.resolve`: a name registered in
this process (the built-ins, or yours via `register_parser`, `register_reducer`, ...), else
`package.module:attribute` (imported), else `path/to/file.py:attribute` (the file imported once per
process). A name that is neither is refused with the registered names listed.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["Registry", "FILE_MODULE_PREFIX", "import_attribute", "import_file", "import_plugin", "is_file_spec"]

_F = TypeVar("_F")
_C = TypeVar("_C")  # a class, or a factory function

FILE_MODULE_PREFIX = "_openreward_rl_file_"  # the module names `import_file` gives the files it imports
SPEC_FORMS = "package.module:attribute or path/to/file.py:attribute"


def import_file(path: str | os.PathLike[str]) -> Any:
    """The module in the Python file at `path`, imported once per process (keyed by its absolute path).

    >>> import_file("no/such/file.py")
    Traceback (most recent call last):
    ...
    ValueError: Python file 'no/such/file.py' does not exist
    """
    resolved = Path(path).resolve()
    if not resolved.is_file():
        raise ValueError(f"Python file {str(path)!r} does not exist")
    digest = hashlib.sha1(str(resolved).encode()).hexdigest()[:12]
    module_name = f"{FILE_MODULE_PREFIX}{resolved.stem}_{digest}"
    if module_name in sys.modules:  # per-process import cache, keyed by absolute path
        return sys.modules[module_name]
    module_spec = importlib.util.spec_from_file_location(module_name, resolved)
    if module_spec is None or module_spec.loader is None:
        raise ValueError(f"Python file {str(path)!r} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module  # before exec: pydantic and dataclasses look their module up
    try:
        module_spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


def is_file_spec(location: str) -> bool:
    """Whether `location` names a file (`path/to/file.py`) rather than a module (`package.module`)."""
    return location.endswith(".py") or os.sep in location or "/" in location


def import_plugin(location: str) -> Any:
    """The module `location` names: a file (`path/to/file.py`) or a module (`package.module`), imported;
    ValueError naming the problem (the module's own import error included).

    >>> import_plugin("no_such_module_xyz")
    Traceback (most recent call last):
    ...
    ValueError: cannot import module 'no_such_module_xyz': ModuleNotFoundError: No module named 'no_such_module_xyz'
    """
    try:
        return import_file(location) if is_file_spec(location) else importlib.import_module(location)
    except ValueError:
        raise
    except Exception as error:  # the module's own fault (a missing dependency, a syntax error, ...): one line, chained
        raise ValueError(f"cannot import module {location!r}: {type(error).__name__}: {error}") from error


def import_attribute(spec: str) -> Any:
    """The attribute `spec` names, as `package.module:attribute` or `path/to/file.py:attribute` (the
    attribute may be dotted: `module:Class.build`).

    >>> import_attribute("openreward_rl._registry:Registry") is Registry
    True
    >>> import_attribute("openreward_rl._registry:Nothing")
    Traceback (most recent call last):
    ...
    ValueError: 'openreward_rl._registry:Nothing': module 'openreward_rl._registry' has no attribute 'Nothing'
    """
    location, sep, attribute = spec.rpartition(":")
    if not sep or not location or not all(part.isidentifier() for part in attribute.split(".")):
        raise ValueError(f"{spec!r} must look like {SPEC_FORMS}")
    try:
        value = import_plugin(location)
    except ValueError as error:
        raise ValueError(f"{spec!r}: {error}") from None
    for part in attribute.split("."):  # `module:Class.build` reaches a class's attribute
        try:
            value = getattr(value, part)
        except AttributeError:
            raise ValueError(f"{spec!r}: module {location!r} has no attribute {attribute!r}") from None
    return value


def _defining_file(obj: Any) -> str | None:
    module = sys.modules.get(getattr(obj, "__module__", "") or "")
    file = getattr(module, "__file__", None)
    return str(Path(file).resolve()) if file else None


def same_definition(first: Any, second: Any) -> bool:
    """Whether `first` and `second` are one definition loaded twice: the same qualified name in the same file.

    >>> same_definition(Registry, Registry), same_definition(Registry, dict)
    (True, False)
    """
    if first is second:
        return True
    name = getattr(first, "__qualname__", None)
    return (
        name is not None
        and name == getattr(second, "__qualname__", None)
        and _defining_file(first) == _defining_file(second) is not None
    )


class Registry(dict[str, _F]):
    """A dict of name -> factory, filled by `register` and read by `resolve`.

    `duplicate` is the ValueError message for a name registered twice, `unknown` the one for a name
    never registered; both are formatted with `name`, and `unknown` with `known` too (the registered
    names, sorted and comma-separated).

    >>> shapes = Registry(duplicate="a shape named {name!r} is already registered", unknown="unknown shape {name!r}; known: {known}")
    >>> @shapes.register("square")
    ... class Square: ...
    >>> shapes.resolve("square") is Square, shapes.names()
    (True, ['square'])
    >>> shapes.resolve("openreward_rl._registry:Registry") is Registry
    True
    >>> shapes.resolve("circle")
    Traceback (most recent call last):
    ...
    ValueError: unknown shape 'circle'; known: square; or name your own as package.module:attribute or path/to/file.py:attribute
    >>> shapes.register("square")(Registry)
    Traceback (most recent call last):
    ...
    ValueError: a shape named 'square' is already registered
    """

    def __init__(self, *, duplicate: str, unknown: str) -> None:
        super().__init__()
        self.duplicate = duplicate
        self.unknown = unknown

    def register(self, name: str, *, replace: bool = False) -> Callable[[_C], _C]:
        """Class decorator: register the class under `name`. A name is registered once, unless `replace`, or
        unless the same file defines it again (a file run as a script and imported as a plugin)."""

        def decorate(cls: _C) -> _C:
            if name in self and not replace and not same_definition(self[name], cls):
                raise ValueError(self.duplicate.format(name=name))
            self[name] = cls  # type: ignore[assignment]
            return cls

        return decorate

    def resolve(self, spec: str, *, known: Iterable[str] | None = None) -> _F:
        """What `spec` names: a registered name, else an attribute imported by `import_attribute`.
        An unknown name's error lists `known` (default: every registered name, sorted)."""
        if spec in self:
            return self[spec]
        if ":" not in spec:
            listed = ", ".join(self.names() if known is None else known)
            raise ValueError(f"{self.unknown.format(name=spec, known=listed)}; or name your own as {SPEC_FORMS}")
        return import_attribute(spec)

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self)
