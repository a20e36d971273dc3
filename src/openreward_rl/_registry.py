"""`Registry`: names -> classes (or factories) that a class decorator registers; the tool parsers' and
the reward reducers' registries."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

__all__ = ["Registry"]

_F = TypeVar("_F")
_C = TypeVar("_C", bound=type)


class Registry(dict[str, _F]):
    """A dict of name -> factory, filled by `register` and read by `factory`.

    `duplicate` is the ValueError message for a name registered twice, `unknown` the one for a name
    never registered; both are formatted with `name`, and `unknown` with `known` too (the registered
    names, sorted and comma-separated).

    >>> shapes = Registry(duplicate="a shape named {name!r} is already registered", unknown="unknown shape {name!r}; known: {known}")
    >>> @shapes.register("square")
    ... class Square: ...
    >>> shapes.factory("square") is Square, shapes.names()
    (True, ['square'])
    >>> shapes.factory("circle")
    Traceback (most recent call last):
    ...
    ValueError: unknown shape 'circle'; known: square
    >>> shapes.register("square")(Square)
    Traceback (most recent call last):
    ...
    ValueError: a shape named 'square' is already registered
    """

    def __init__(self, *, duplicate: str, unknown: str) -> None:
        super().__init__()
        self.duplicate = duplicate
        self.unknown = unknown

    def register(self, name: str) -> Callable[[_C], _C]:
        """Class decorator: register the class under `name` (a name is registered once)."""

        def decorate(cls: _C) -> _C:
            if name in self:
                raise ValueError(self.duplicate.format(name=name))
            self[name] = cls  # type: ignore[assignment]
            return cls

        return decorate

    def factory(self, name: str) -> _F:
        """The factory registered under `name`."""
        try:
            return self[name]
        except KeyError:
            raise ValueError(self.unknown.format(name=name, known=", ".join(self.names()))) from None

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self)
