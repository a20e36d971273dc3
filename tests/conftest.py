"""Shared fixtures: one real OpenReward environment server on 127.0.0.1 for the whole test session.

The server is the SDK's own `Server` running the example environments (WhoDunIt, MathEnv, Faulty,
ClosestGuess, GradedGuess) under uvicorn in a daemon thread; tests talk to it with the SDK's real
`AsyncOpenReward` client.
Async tests use anyio's pytest plugin: mark them ``@pytest.mark.anyio``.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

# Before the SDK is imported anywhere: no PyPI update check, no hub downloads, loopback never via a proxy.
os.environ["OPENREWARD_DISABLE_UPDATE_CHECK"] = "1"
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("OPENREWARD_LOG_LEVEL", "WARNING")  # the in-process env server logs every request at INFO
# Nothing in the suite may reach a public host: anything not pointed at a local server on purpose
# (uploads, default sessions) goes to a closed loopback port and fails fast. WandB stays offline.
for _key in ("OPENREWARD_URL", "OPENREWARD_API_URL", "OPENREWARD_SESSION_URL"):
    os.environ[_key] = "http://127.0.0.1:9"
os.environ["WANDB_MODE"] = "offline"
for _key in ("NO_PROXY", "no_proxy"):
    _entries = [e for e in os.environ.get(_key, "").split(",") if e.strip()]
    os.environ[_key] = ",".join(dict.fromkeys([*_entries, "127.0.0.1", "localhost"]))

from openreward import AsyncOpenReward  # noqa: E402
from openreward.api.environments.client import AsyncEnvironment  # noqa: E402

from openreward_rl.assets import load_tokenizer  # noqa: E402
from openreward_rl.env.local_server import LocalEnvServer, serve_environments  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_ENVIRONMENTS = REPO_ROOT / "examples" / "environments"
# Served in this order: WhoDunIt is the server's default route.
EXAMPLE_ENV_SPECS = {
    "WhoDunIt": f"{EXAMPLE_ENVIRONMENTS / 'whodunit.py'}:WhoDunIt",
    "MathEnv": f"{EXAMPLE_ENVIRONMENTS / 'math_env.py'}:MathEnv",
    "Faulty": f"{EXAMPLE_ENVIRONMENTS / 'faulty.py'}:Faulty",
    "ClosestGuess": f"{EXAMPLE_ENVIRONMENTS / 'closest_guess.py'}:ClosestGuess",  # implements score_group
    "GradedGuess": f"{EXAMPLE_ENVIRONMENTS / 'closest_guess.py'}:GradedGuess",  # the quickstart's: graded by closeness
    "CombinationLock": f"{EXAMPLE_ENVIRONMENTS / 'combination_lock.py'}:CombinationLock",  # per-turn progress rewards
    "Corridor": f"{EXAMPLE_ENVIRONMENTS / 'corridor.py'}:Corridor",  # long episodes with bulky observations (context compaction)
}


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def qwen3_tokenizer() -> Any:
    """The real Qwen3 tokenizer and chat template (offline copy, see openreward_rl.assets)."""
    return load_tokenizer("offline:qwen3")


@pytest.fixture(scope="session")
def example_env_specs() -> dict[str, str]:
    """Class name -> ``"/abs/path/file.py:Class"`` spec for each example environment."""
    return dict(EXAMPLE_ENV_SPECS)


@pytest.fixture
def train_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], Path]:
    """Writes the given YAML as the test's train config (``tmp_path/train_config.yaml``), points
    ``OPENREWARD_RL_CONFIG`` at it, and returns the file."""

    def write(text: str) -> Path:
        file = tmp_path / "train_config.yaml"
        file.write_text(text)
        monkeypatch.setenv("OPENREWARD_RL_CONFIG", str(file))
        return file

    return write


@pytest.fixture
def served_config(train_config: Callable[[str], Path], env_server: LocalEnvServer) -> Callable[..., Path]:
    """`train_config` for environments of the session's `env_server`: each named one served by its lower-cased
    variant with its own settings, then the hooks' usual `parser: hermes`, one attempt, no upload, and `settings`.

    `served_config({"MathEnv": {"max_turns": 3}}, advantage={"estimator": "turn"})`"""

    def write(environments: Mapping[str, Mapping[str, Any]], **settings: Any) -> Path:
        served = {
            name: {"variant": name.lower(), "base_url": env_server.base_url, **extra}
            for name, extra in environments.items()
        }
        config = {"environments": served, "parser": "hermes", "attempts": 1, "upload": False, **settings}
        return train_config(yaml.safe_dump(config, sort_keys=False))

    return write


@pytest.fixture(scope="session")
def env_server() -> Iterator[LocalEnvServer]:
    """WhoDunIt, MathEnv, Faulty, ClosestGuess and GradedGuess on one in-process server; use ``env_server.environment(client, "MathEnv")``."""
    with serve_environments(list(EXAMPLE_ENV_SPECS.values())) as server:
        yield server


@pytest.fixture
async def openreward_client() -> AsyncIterator[AsyncOpenReward]:
    """A real SDK client; its HTTP sessions are closed after the test."""
    client = AsyncOpenReward(api_key="local")
    try:
        yield client
    finally:
        await client.environments.aclose()


def _served_environment(name: str) -> Any:
    """A fixture of the example environment `name` (one each below)."""

    @pytest.fixture
    async def environment(env_server: LocalEnvServer, openreward_client: AsyncOpenReward) -> AsyncEnvironment:
        """The example environment on the session's server, through the test's own SDK client."""
        return env_server.environment(openreward_client, name)

    return environment


whodunit_env = _served_environment("WhoDunIt")
math_env = _served_environment("MathEnv")
faulty_env = _served_environment("Faulty")
closest_guess_env = _served_environment("ClosestGuess")
