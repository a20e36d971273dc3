"""Our requirements resolve together with the pins of the trainers we install into.

pip's own resolver (`pip install --dry-run --ignore-installed --report`) resolves pyproject.toml's
dependencies with each trainer environment's pins as constraints files (tests/data/pins/, each with a
header naming its source repository, commit and path, and what was left out). Asks PyPI: marked
`network` and never skipped, so a run without the index fails instead of passing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PINS = REPO / "tests" / "data" / "pins"
# Each environment: the framework's requirements.txt and the SGLang its Docker image builds on.
ENVIRONMENTS = {
    "miles-31f1ca9": ("miles-31f1ca9.txt", "sglang-0.5.16.txt"),
    "slime-624b824": ("slime-624b824.txt", "sglang-0.5.15.post1.txt"),
    "sglang-0.5.23": ("sglang-0.5.23.txt",),
}

pytestmark = pytest.mark.network


def dependencies(extra: str | None = None) -> list[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return list(project["dependencies"]) + (list(project["optional-dependencies"][extra]) if extra else [])


def resolve(requirements: list[str], pin_files: tuple[str, ...], report: Path) -> subprocess.CompletedProcess[str]:
    constraints = [arg for name in pin_files for arg in ("-c", str(PINS / name))]
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--disable-pip-version-check",
               "--report", str(report), *constraints, *requirements]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def pinned(pin_files: tuple[str, ...], name: str) -> str | None:
    for file in pin_files:
        for line in (PINS / file).read_text().splitlines():
            if line.startswith(f"{name}=="):
                return line.split("==", 1)[1].split(";")[0].split()[0]
    return None


@pytest.mark.parametrize("environment", sorted(ENVIRONMENTS))
def test_requirements_resolve_with_the_trainers_pins(environment: str, tmp_path: Path) -> None:
    pin_files = ENVIRONMENTS[environment]
    result = resolve(dependencies(), pin_files, tmp_path / "report.json")
    errors = [line for line in result.stderr.splitlines() if line.startswith("ERROR")]
    assert result.returncode == 0 and not errors, f"{environment}: pip could not resolve our requirements with its pins:\n" + "\n".join(errors or result.stderr.splitlines()[-10:])
    resolved = {item["metadata"]["name"].lower(): item["metadata"]["version"] for item in json.loads((tmp_path / "report.json").read_text())["install"]}
    assert {"openreward", "renderers", "transformers", "tokenizers"} <= set(resolved)
    for name in ("transformers", "tokenizers", "openai"):  # the constraints were applied, not ignored
        if (version := pinned(pin_files, name)) is not None:
            assert resolved[name] == version, (name, resolved[name], version)


def test_the_check_fails_on_a_requirement_that_excludes_a_pin(tmp_path: Path) -> None:
    """The requirement this file replaced (transformers>=5.17) cannot install next to Miles' 5.12.1."""
    requirements = [r for r in dependencies() if not r.startswith("transformers")] + ["transformers>=5.17"]
    result = resolve(requirements, ENVIRONMENTS["miles-31f1ca9"], tmp_path / "report.json")
    assert "ResolutionImpossible" in result.stderr and "transformers" in result.stderr
