"""Options objects built from another object's attributes of the same names (parsed command-line flags,
another options object), so a mapping lists only the fields it changes.

>>> from types import SimpleNamespace
>>> same_named(SimpleNamespace(seed=3, top_p=0.9), "seed", "top_p")
{'seed': 3, 'top_p': 0.9}
"""

from __future__ import annotations

from typing import Any, TypeVar

import attrs

__all__ = ["from_attributes", "same_named"]

T = TypeVar("T", bound=attrs.AttrsInstance)


def same_named(source: Any, *names: str) -> dict[str, Any]:
    """`{name: source.name}` for each of `names`: the values one object passes on unchanged to another."""
    return {name: getattr(source, name) for name in names}


def from_attributes(cls: type[T], source: Any, **given: Any) -> T:
    """The attrs class `cls` from `given`, each of its other fields read from `source`'s attribute of that
    name; a field `source` lacks keeps its default.

    >>> from types import SimpleNamespace
    >>> @attrs.frozen
    ... class Options:
    ...     model: str
    ...     seed: int = 0
    ...     steps: int = 1
    >>> from_attributes(Options, SimpleNamespace(model=" m ", seed=7), model="m")
    Options(model='m', seed=7, steps=1)
    """
    names = [
        field.name
        for field in attrs.fields(cls)
        if field.init and field.name not in given and hasattr(source, field.name)
    ]
    return cls(**same_named(source, *names), **given)
