"""Bad configuration gives one clear error before any work starts: `preflight.check_ready` (no
network) and `preflight.check_environments` against the SDK's real environment `Server` on
127.0.0.1; an unknown environment met mid-run is an env_error naming it, never a crash."""

from __future__ import annotations

import pytest
from fault_harness import EpisodeRun, assert_sample
from openreward import AsyncOpenReward

from hermes_calls import call
from openreward_rl import StopReason
from openreward_rl.config import ConfigError, parse_config
from openreward_rl.env.local_server import LocalEnvServer
from openreward_rl.preflight import check_environments, check_ready
from openreward_rl.testing import ScriptedCompletion

pytestmark = pytest.mark.anyio


def config(environments: dict, **top) -> object:
    return parse_config({"environments": environments, **top}, source="train_config.yaml")


def test_a_remote_environment_needs_an_api_key() -> None:
    remote = config({"GeneralReasoning/WhoDunIt": {}, "Local": {"base_url": "http://127.0.0.1:1"}})
    with pytest.raises(
        ConfigError, match=r"environment 'GeneralReasoning/WhoDunIt' is served by OpenReward .* set OPENREWARD_API_KEY"
    ):
        check_ready(remote, environ={})
    check_ready(remote, environ={"OPENREWARD_API_KEY": "or-live-abcdef"})
    check_ready(remote, environ={}, api_key="or-live-abcdef")
    local = config({"WhoDunIt": {}}, env_base_url="http://127.0.0.1:8080")
    check_ready(local, environ={})  # local environments need no key


def test_resolved_secrets_are_registered_for_redaction_before_any_work() -> None:
    from openreward_rl.redaction import SECRETS

    ready = config(
        {
            "WhoDunIt": {
                "base_url": "http://127.0.0.1:1",
                "secrets": {"my_token": {"value": None, "domains": ["api.example.com"]}},
            }
        },
        secrets={"openai_api_key": None},
    )
    check_ready(ready, environ={"MY_TOKEN": "tok-preflight-1234", "OPENAI_API_KEY": "sk-preflight-5678"})
    assert "tok-preflight-1234" in SECRETS and "sk-preflight-5678" in SECRETS


def test_a_base_url_without_a_scheme_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"base URL '127.0.0.1:8080' must start with http://"):
        check_ready(config({"WhoDunIt": {"base_url": "127.0.0.1:8080"}}), environ={})


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"WhoDunIt": {"reward_reduction": "avg"}}, r"unknown reward reduction 'avg'; choose one of"),
        ({"WhoDunIt": {"max_turns": 0}}, r"max_turns: must be a positive integer"),
        ({"WhoDunIt": {"splits": []}}, r"splits: must be a non-empty list"),
        ({"WhoDunIt": {"secrets": {"my_token": "abcdefgh"}}}, r"does not know which hosts 'my_token' may reach"),
    ],
)
def test_bad_config_values_name_the_key(raw: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config(raw)


async def test_check_environments_accepts_what_the_server_offers(
    env_server: LocalEnvServer, openreward_client: AsyncOpenReward
) -> None:
    good = config({"WhoDunIt": {"variant": "whodunit", "splits": ["train"]}}, env_base_url=env_server.base_url)
    await check_environments(openreward_client, good)


async def test_an_unknown_environment_is_named_before_any_episode(
    env_server: LocalEnvServer, openreward_client: AsyncOpenReward
) -> None:
    unknown = config({"WhoDunnit": {"variant": "whodunnit"}}, env_base_url=env_server.base_url)
    with pytest.raises(
        ConfigError,
        match=r"environment 'WhoDunnit' with variant 'whodunnit' is not served at http://127\.0\.0\.1:\d+; it serves: whodunit, ",
    ):
        await check_environments(openreward_client, unknown)


async def test_an_unknown_split_is_named(env_server: LocalEnvServer, openreward_client: AsyncOpenReward) -> None:
    wrong = config({"WhoDunIt": {"variant": "whodunit", "splits": ["training"]}}, env_base_url=env_server.base_url)
    with pytest.raises(ConfigError, match=r"splits: 'training' not offered by the environment; it has: train"):
        await check_environments(openreward_client, wrong)


async def test_an_unreachable_server_is_named(openreward_client: AsyncOpenReward) -> None:
    from openreward_rl.retry import RetryPolicy

    gone = config({"WhoDunIt": {}}, env_base_url="http://127.0.0.1:9")
    with pytest.raises(
        ConfigError,
        match=r"cannot reach the environment server at http://127\.0\.0\.1:9 \(for 'WhoDunIt'\): .*(Connect|connect)",
    ):
        await check_environments(openreward_client, gone, retry=RetryPolicy(attempts=1))


async def test_an_unknown_environment_mid_run_is_an_env_error(
    env_server: LocalEnvServer, openreward_client: AsyncOpenReward, fault_report
) -> None:
    run = EpisodeRun(openreward_client, env_server.base_url, "nosuchenv")
    trajectory, _ = await run.run([ScriptedCompletion(text=call("submit", answer="ok"))], environment="NoSuchEnv")
    fault_report.sample("unknown environment", trajectory)
    assert_sample(trajectory, infrastructure=True)
    assert trajectory.stop_reason is StopReason.ENV_ERROR
    assert "'NoSuchEnv'" in trajectory.stop_detail and "was not found" in trajectory.stop_detail
