"""The version gate every compat module uses: the library's version and the internals the module relies on."""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version

import attrs
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from openreward_rl.errors import OpenRewardRLError

__all__ = ["CompatError", "Gate", "Internal"]


class CompatError(OpenRewardRLError):
    """An installed library moved or changed an internal openreward_rl relies on (see `openreward_rl._compat`)."""


@attrs.frozen
class Internal:
    """One private name of a library, and how to tell it still has the shape relied on (True: it has)."""

    name: str  # as the library spells it, e.g. "openreward.api._session.http._parse_sse_events"
    holds: Callable[[], bool]


@attrs.define(eq=False)
class Gate:
    """A library's supported versions and the internals a compat module touches; `check()` fails loudly,
    naming the library, its version and the internal that moved. Checked once per process (then cached)."""

    distribution: str  # the name pip knows it by
    supported: str  # a version specifier; "" where any version with the right shape will do
    internals: Callable[[], list[Internal]]  # built when checked: building them imports the library
    _passed: bool = attrs.field(default=False, init=False)

    def installed_version(self) -> str:
        try:
            return version(self.distribution)
        except PackageNotFoundError as error:
            raise CompatError(
                f"{self.distribution} is not installed; openreward_rl needs {self.distribution}{self.supported}"
            ) from error

    def check(self) -> None:
        if self._passed:
            return
        found = self.installed_version()
        if self.supported and Version(found) not in SpecifierSet(self.supported):
            raise CompatError(
                f"{self.distribution} {found} is outside the versions openreward_rl supports ({self.supported}): install {self.distribution}{self.supported}"
            )
        for internal in self.internals():
            try:
                holds = internal.holds()
            except (ImportError, AttributeError, TypeError) as error:
                holds, detail = False, f": {type(error).__name__}: {error}"
            else:
                detail = ""
            if not holds:
                raise CompatError(
                    f"{self.distribution} {found} moved or changed {internal.name}{detail}; openreward_rl relies on it "
                    f"(src/openreward_rl/_compat, docs/upstream.md): install a {self.distribution} it was tested with ({self.supported or 'see pyproject.toml'})"
                )
        self._passed = True


def callable_attribute(owner: object, name: str) -> bool:
    """Whether `owner.name` exists and can be called (an `Internal`'s check of a method or function)."""
    return callable(getattr(owner, name, None))
