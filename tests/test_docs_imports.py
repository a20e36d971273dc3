"""Every import statement and every dotted `openreward_rl.…` name that README.md and docs/ show a
reader resolves against the installed package: a moved module or renamed name fails here, not in a
user's first script."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
IMPORT = re.compile(
    r"^\s*(?:>>>\s*)?((?:from openreward_rl[\w.]* import [\w, ()]+)|(?:import openreward_rl[\w.]*(?: as \w+)?))\s*(?:#.*)?$",
    re.M,
)
DOTTED = re.compile(r"(?<![\w/.-])openreward_rl(?:\.\w+)+")


def _imports(page: Path) -> list[str]:
    return sorted({m.group(1).strip() for m in IMPORT.finditer(page.read_text())})


def _dotted(page: Path) -> list[str]:
    return sorted({m.group(0).rstrip(".") for m in DOTTED.finditer(page.read_text())})


def resolve(dotted: str) -> object:
    """The object a dotted name names: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError as error:
            if error.name is None or not ".".join(parts[:cut]).startswith(error.name):
                raise
            continue
        for attribute in parts[cut:]:
            value = getattr(value, attribute)
        return value
    raise ModuleNotFoundError(dotted)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_import_a_page_shows_runs(page: Path) -> None:
    for statement in _imports(page):
        exec(statement, {})  # noqa: S102 - the statement is the page's own text


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_dotted_name_a_page_shows_resolves(page: Path) -> None:
    unresolved = []
    for name in _dotted(page):
        try:
            resolve(name)
        except (ImportError, AttributeError) as error:
            unresolved.append(f"{name}: {error}")
    assert not unresolved, f"{page.name} names what does not exist:\n" + "\n".join(unresolved)


def test_the_checks_catch_a_moved_module() -> None:
    with pytest.raises((ImportError, AttributeError)):
        resolve("openreward_rl.environment.TaskRef")  # moved to openreward_rl.env.tasks
    assert resolve("openreward_rl.env.tasks.TaskRef") is resolve("openreward_rl.TaskRef")
