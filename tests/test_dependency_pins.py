"""Our requirements resolve together with the pins of the trainers we install into.

pip's own resolver (`pip install --dry-run --ignore-installed --report`) resolves pyproject.toml's
dependencies with each trainer environment's pins as constraints files (tests/data/pins/, each with a
header naming its source repository, commit and path, and what was left out). Asks PyPI: marked
`network` and never skipped, so a run without the index fails instead of passing. The last test proves
the transformers floor: the trainers' tests run on the transformers Miles pins.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Callable
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
    command = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--dry-run",
        "--ignore-installed",
        "--quiet",
        "--disable-pip-version-check",
        "--report",
        str(report),
        *constraints,
        *requirements,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def pinned(pin_files: tuple[str, ...], name: str) -> str | None:
    for file in pin_files:
        for line in (PINS / file).read_text().splitlines():
            if line.startswith(f"{name}=="):
                return line.split("==", 1)[1].split(";")[0].split()[0]
    return None


@pytest.fixture(scope="module")
def resolved_with_pins(
    tmp_path_factory: pytest.TempPathFactory,
) -> Callable[[str], tuple[subprocess.CompletedProcess[str], Path]]:
    """`resolve` of our requirements with one environment's pins, asked of pip once per environment for the module:
    (pip's result, its report)."""
    done: dict[str, tuple[subprocess.CompletedProcess[str], Path]] = {}

    def resolved(environment: str) -> tuple[subprocess.CompletedProcess[str], Path]:
        if environment not in done:
            report = tmp_path_factory.mktemp(environment) / "report.json"
            done[environment] = (resolve(dependencies(), ENVIRONMENTS[environment], report), report)
        return done[environment]

    return resolved


@pytest.mark.parametrize("environment", sorted(ENVIRONMENTS))
def test_requirements_resolve_with_the_trainers_pins(
    environment: str, resolved_with_pins: Callable[[str], tuple[subprocess.CompletedProcess[str], Path]]
) -> None:
    pin_files = ENVIRONMENTS[environment]
    result, report = resolved_with_pins(environment)
    errors = [line for line in result.stderr.splitlines() if line.startswith("ERROR")]
    assert result.returncode == 0 and not errors, (
        f"{environment}: pip could not resolve our requirements with its pins:\n"
        + "\n".join(errors or result.stderr.splitlines()[-10:])
    )
    resolved = {
        canonical(item["metadata"]["name"]): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    assert {"openreward", "renderers", "transformers", "tokenizers"} <= set(resolved)
    for name in ("transformers", "tokenizers", "openai"):  # the constraints were applied, not ignored
        if (version := pinned(pin_files, name)) is not None:
            assert resolved[name] == version, (name, resolved[name], version)


def test_the_check_fails_on_a_requirement_that_excludes_a_pin(tmp_path: Path) -> None:
    """The requirement this file replaced (transformers>=5.17) cannot install next to Miles' 5.12.1."""
    requirements = [r for r in dependencies() if not r.startswith("transformers")] + ["transformers>=5.17"]
    result = resolve(requirements, ENVIRONMENTS["miles-31f1ca9"], tmp_path / "report.json")
    assert "ResolutionImpossible" in result.stderr and "transformers" in result.stderr


# The tests that exercise transformers on the trainers' path: tokenizers, chat templates, model families,
# the chat bridge, the Slime/Miles hooks and Miles' agent path. Left out: the embedded engine (the `model`
# extra, which needs transformers >= 5.18) and one test that pins down how transformers renders
# DeepSeek-V3's own template with a None content (a transformers behaviour, not ours: 5.12.1 differs).
FLOOR_TESTS = [
    "tests/test_token_text.py",
    "tests/test_plain_text_encoder.py",
    "tests/test_renderers_tokenizer_view.py",
    "tests/test_families.py",
    "tests/test_chat_bridge.py",
    "tests/test_encoded_context.py",
    "tests/test_miles_source.py",
    "tests/test_miles_agent.py",
    "tests/test_miles_agent_source.py",
]
FLOOR_EXCLUDED = "not deepseek_v3s_official_template_cannot_hold_a_tool_episode"


@pytest.mark.timeout(1200)  # a nested pytest run of ~200 tests (about 1.5 min here)
def test_the_trainers_path_passes_on_miles_transformers(
    resolved_with_pins: Callable[[str], tuple[subprocess.CompletedProcess[str], Path]],
) -> None:
    """The transformers floor is Miles' pin: the transformers, tokenizers and huggingface-hub pip resolves
    under Miles' and SGLang 0.5.16's pins go first on PYTHONPATH, and the trainers' tests run on them."""
    result, report = resolved_with_pins("miles-31f1ca9")
    assert result.returncode == 0, result.stderr[-2000:]
    resolved = {
        canonical(item["metadata"]["name"]): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    floor = [f"{name}=={resolved[name]}" for name in ("transformers", "tokenizers", "huggingface-hub")]
    assert floor[0] == "transformers==5.12.1"
    target = Path.home() / ".cache" / "openreward_rl" / ("floor-" + "-".join(r.split("==")[1] for r in floor))
    if not (target / "transformers").is_dir():
        install = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "--target",
            str(target),
            *floor,
        ]
        done = subprocess.run(install, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), str(REPO / "src")])}
    probe = subprocess.run(
        [sys.executable, "-c", "import transformers; print(transformers.__version__)"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert probe.stdout.strip() == "5.12.1", probe.stderr[-2000:]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-x", "-k", FLOOR_EXCLUDED, *FLOOR_TESTS],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-4000:]
