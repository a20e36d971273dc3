"""The trainers' own Python packages (Slime, Miles) for tests that drive the hooks through their real code.

Neither trainer is on the package index. A checkout of this project with the shared folder beside it
(`../shared/thirdparty/{slime,miles}`, as CI has it) holds both at pinned commits; a user's clone does
not, and the tests that need them are skipped with the reason. `OPENREWARD_RL_TRAINER_SOURCE` names
another folder laid out the same way (`<folder>/slime/slime`, `<folder>/miles/miles`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

__all__ = ["TRAINER_SOURCE_ENV", "trainer_source", "use_trainer_source"]

TRAINER_SOURCE_ENV = "OPENREWARD_RL_TRAINER_SOURCE"
_DEFAULT = Path(__file__).resolve().parents[1].parent / "shared" / "thirdparty"


def trainer_source(trainer: str) -> Path | None:
    """The folder that holds `trainer`'s package (`slime` or `miles`), or None where it is absent."""
    root = Path(os.environ.get(TRAINER_SOURCE_ENV) or _DEFAULT)
    folder = root / trainer
    return folder if (folder / trainer / "__init__.py").is_file() else None


def use_trainer_source(trainer: str) -> Path:
    """Put `trainer`'s package on `sys.path` (once), or skip the calling test with the reason."""
    folder = trainer_source(trainer)
    if folder is None:
        pytest.skip(
            f"{trainer}'s own source is not here (../shared/thirdparty/{trainer}, or ${TRAINER_SOURCE_ENV}); the tests through its rollout code need it"
        )
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    return folder
