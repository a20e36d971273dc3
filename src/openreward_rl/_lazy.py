"""Lazy re-exports for package `__init__` modules: a name is imported on first use, so importing a
package does not import what only some of its modules need (the OpenReward SDK, torch, ...)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, names_by_module: Mapping[str, Iterable[str]], namespace: dict[str, Any]
) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """The `__all__`, `__getattr__` and `__dir__` of `package`, whose names come from the modules of
    `names_by_module` (module -> the names it gives the package).

    A name is imported once and then kept in `namespace` (the package's globals), so later lookups are
    plain attribute reads.

    >>> names, getattr_, _ = lazy_exports("demo", {"json": ["dumps"]}, {})
    >>> names, getattr_("dumps")([1])
    (['dumps'], '[1]')
    """
    exports = {name: module for module, names in names_by_module.items() for name in names}

    def __getattr__(name: str) -> Any:
        try:
            module = exports[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted([*namespace, *exports])

    return sorted(exports), __getattr__, __dir__
