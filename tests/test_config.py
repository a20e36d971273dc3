"""train_config.yaml: the cookbook's schema unchanged, our keys, and one clear error per problem."""

from pathlib import Path

import pytest

from openreward_rl.config import ConfigError, load_config, parse_config

COOKBOOK_CONFIG = """\
environments:
  GeneralReasoning/WhoDunit:
    splits:
      - train
    nonterminal_reward: 0.0
    reward_reduction: sum
    max_turns: 20
  MATH/GSM8K:
    splits: [train]
    reward_reduction: mean
    max_turns: 10
    num_samples: 100
    min_reward: -1
    max_reward: 1
    secrets:
      judge_key: {value: null, domains: [judge.example.com]}

secrets:
  openai_api_key: null

system_prompt_template: |
  You are an agent. Tools:
  {tools}
  Reply with {{"name": ..., "arguments": ...}}.

thinking: false
openreward_run_name: slime-rl-test-openreward
"""


def test_cookbook_config_loads_unchanged(tmp_path: Path) -> None:
    file = tmp_path / "train_config.yaml"
    file.write_text(COOKBOOK_CONFIG)
    config = load_config(file)
    assert list(config.environments) == ["GeneralReasoning/WhoDunit", "MATH/GSM8K"]
    gsm = config.environment("MATH/GSM8K")
    assert (gsm.reward_reduction, gsm.max_turns, gsm.num_samples, gsm.min_reward, gsm.max_reward) == (
        "mean",
        10,
        100,
        -1.0,
        1.0,
    )
    assert config.environment("GeneralReasoning/WhoDunit").nonterminal_reward == 0.0
    assert config.thinking is False and config.openreward_run_name == "slime-rl-test-openreward"
    assert (
        config.max_turn_continuations == 3
    )  # our key's default: a turn cut by a weight update is continued up to 3 times
    assert config.environment("MATH/GSM8K").reward_policy().final_reward([0.5, 1.0], finished=True) == 0.75


def test_config_located_by_environment_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    file = tmp_path / "cfg.yaml"
    file.write_text(COOKBOOK_CONFIG)
    monkeypatch.delenv("OPENREWARD_RL_CONFIG", raising=False)
    monkeypatch.setenv("TRAIN_CONFIG", str(file))
    assert load_config().source == str(file)
    other = tmp_path / "other.yaml"
    other.write_text("environments:\n  a/b: {}\n")
    monkeypatch.setenv("OPENREWARD_RL_CONFIG", str(other))
    assert list(load_config().environments) == ["a/b"]


def test_secrets_env_specific_over_global_over_environment_variables() -> None:
    config = parse_config(
        {
            "environments": {
                "a/b": {
                    "secrets": {
                        "judge_key": {"value": None, "domains": ["judge.example"]},
                        "openai_api_key": None,
                        "tavily_api_key": "",
                    }
                },
                "c/d": {},
            },
            "secrets": {"OPENAI_API_KEY": None, "tavily_api_key": "global-tavily", "hf_token": "hf-global"},
        }
    )
    environ = {"OPENAI_API_KEY": "sk-from-env", "JUDGE_KEY": "judge-from-env"}
    # env-specific null reads the environment, an env-specific empty string drops the global value
    assert config.resolve_secrets("a/b", environ) == {
        "OPENAI_API_KEY": "sk-from-env",
        "hf_token": "hf-global",
        "judge_key": "judge-from-env",
        "openai_api_key": "sk-from-env",
    }
    assert config.resolve_secrets("c/d", environ) == {
        "OPENAI_API_KEY": "sk-from-env",
        "tavily_api_key": "global-tavily",
        "hf_token": "hf-global",
    }
    # a secret configured to be read from an unset variable is an error naming it, not a silent drop
    with pytest.raises(
        ConfigError,
        match=r"secrets\.OPENAI_API_KEY is configured to be read from the environment, but OPENAI_API_KEY is not set",
    ):
        config.resolve_secrets("c/d", {})
    with pytest.raises(
        ConfigError,
        match=r"environments\.a/b\.secrets\.judge_key is configured to be read from the environment, but JUDGE_KEY or judge_key is not set",
    ):
        config.resolve_secrets("a/b", {"OPENAI_API_KEY": "sk-from-env"})
    # the SDK's form: names it does not know travel with their configured domains
    assert config.session_secrets("a/b", environ)["judge_key"] == ("judge-from-env", ["judge.example"])
    assert config.session_secrets("a/b", environ)["openai_api_key"] == "sk-from-env"


def test_resolving_secrets_registers_them_for_redaction() -> None:
    """Config secrets are registered where they enter the process, whoever resolves them."""
    from openreward_rl.redaction import SECRETS, redact

    config = parse_config(
        {
            "environments": {"a/b": {"secrets": {"judge_key": {"value": None, "domains": ["judge.example"]}}}},
            "secrets": {"hf_token": "tok-config-resolved-77"},
        }
    )
    assert "tok-config-resolved-77" not in SECRETS and "judge-env-resolved-88" not in SECRETS
    config.resolve_secrets("a/b", {"JUDGE_KEY": "judge-env-resolved-88"})
    assert redact("tok-config-resolved-77 / judge-env-resolved-88") == "*** / ***"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({}, "'environments' must map at least one environment"),
        (
            {"environments": {"a/b": {"reward_reduction": "avg"}}},
            "environments.a/b.reward_reduction: unknown reward reduction 'avg'; choose one of: ",
        ),
        (
            {"environments": {"a/b": {"reward_reduction": "fractions:Fraction"}}},
            "reward_reduction: reward reduction 'fractions:Fraction' built Fraction, which lacks a `name` or a `reduce(rewards)` method",
        ),
        (
            {"environments": {"a/b": {}}, "parser": "at_kall"},
            "parser: unknown tool parser 'at_kall'; registered parsers: cohere, ",
        ),
        (
            {"environments": {"a/b": {}}, "parser": "no_such_module_xyz:Parser"},
            "parser: 'no_such_module_xyz:Parser': cannot import module 'no_such_module_xyz'",
        ),
        (
            {"environments": {"a/b": {}}, "model_family": "math:pi"},
            "model_family: model family 'math:pi' is 3.141592653589793, not a ModelFamily",
        ),
        (
            {"environments": {"a/b": {}}, "plugins": ["no/such/plugin.py"]},
            "plugins: Python file 'no/such/plugin.py' does not exist",
        ),
        (
            {
                "environments": {"a/b": {}},
                "system_prompt_template": 'Tools: {tools}\nCall one as <tool_call>{"name": ..., "arguments": {...}}</tool_call>',
            },
            "system_prompt_template: only {tools} may be a placeholder; write other braces doubled, {{ and }}",
        ),
        ({"environments": {"a/b": {"max_turn": 3}}}, "unknown key 'max_turn'; did you mean 'max_turns'?"),
        ({"environments": {"a/b": {"max_turns": 0}}}, "max_turns: must be a positive integer"),
        ({"environments": {"a/b": {"splits": []}}}, "splits: must be a non-empty list"),
        (
            {"environments": {"a/b": {"min_reward": 2, "max_reward": 1}}},
            "min_reward (2.0) is greater than max_reward (1.0)",
        ),
        (
            {"environments": {"a/b": {}}, "tool_execution": "threads"},
            "tool_execution: must be one of sequential, parallel",
        ),
        ({"environments": {"a/b": {}}, "thinking": "yes"}, "thinking: must be true or false"),
        ({"environments": {"a/b": {}}, "sytem_prompt_template": "x"}, "did you mean 'system_prompt_template'?"),
        ({"environments": {"a/b": {"secrets": ["x"]}}}, "secrets: must be a mapping"),
        ({"environments": {"a/b": {"secrets": {"judge_key": "x"}}}}, "does not know which hosts 'judge_key' may reach"),
        ({"environments": {"a/b": {}}, "secrets": {"api_key": "x"}}, "'api_key' is reserved"),
        ({"environments": {"a/b": {"secrets": {"k": {"value": "x"}}}}}, "k.domains: must be a non-empty list"),
        (
            {"environments": {"a/b": {}}, "max_turn_continuations": -1},
            "max_turn_continuations: must be a non-negative integer (0: never continue)",
        ),
        (
            {"environments": {"a/b": {}}, "max_turn_continuations": True},
            "max_turn_continuations: must be a non-negative integer",
        ),
        (
            {"environments": {"a/b": {"toolset": "claude_code"}}},
            "environments.a/b.toolset: unknown toolset 'claude_code'; the SDK's session toolsets are: backsearch, claude-code",
        ),
        (
            {"environments": {"a/b": {"tool_timeout": 0}}},
            "environments.a/b.tool_timeout: must be a positive number of seconds, got 0",
        ),
        (
            {"environments": {"a/b": {"tool_timeouts": {"run_tests": "10m"}}}},
            "environments.a/b.tool_timeouts.run_tests: must be a positive number of seconds, got '10m'",
        ),
        (
            {"environments": {"a/b": {"tool_timeouts": [600]}}},
            "environments.a/b.tool_timeouts: must be a mapping of tool names to seconds",
        ),
    ],
)
def test_bad_config_gives_one_clear_error(raw: dict, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_config(raw, source="train_config.yaml")
    assert message in str(error.value)
    assert str(error.value).startswith("train_config.yaml")


def test_missing_and_invalid_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("environments: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


def test_tool_timeouts_per_tool_over_per_environment_over_the_run_default() -> None:
    """The default suits sandbox environments (test runs of up to 600 s in one call); an environment and
    each of its tools may say otherwise, and each limit knows the key that set it (for the timeout message)."""
    config = parse_config(
        {
            "environments": {
                "sandbox/Env": {"tool_timeout": 1200, "tool_timeouts": {"run_tests": 3600}},
                "plain/Env": {},
            }
        },
        source="train_config.yaml",
    )
    assert config.tool_timeout > 600
    sandbox, plain = config.tool_timeouts("sandbox/Env"), config.tool_timeouts("plain/Env")
    assert (sandbox.seconds("run_tests"), sandbox.seconds("read"), sandbox.seconds(None)) == (3600.0, 1200.0, 1200.0)
    assert sandbox.knob("run_tests") == "environments.sandbox/Env.tool_timeouts.run_tests (3600s)"
    assert sandbox.knob("read").startswith("environments.sandbox/Env.tool_timeout (1200s)")
    assert (
        plain.seconds("run_tests") == config.tool_timeout
        and plain.knob(None) == f"tool_timeout ({config.tool_timeout:g}s)"
    )
    unlimited = parse_config({"environments": {"e": {}}, "tool_timeout": None})
    assert unlimited.tool_timeouts("e").seconds("x") is None


def test_toolset_is_an_sdk_session_toolset() -> None:
    config = parse_config({"environments": {"e": {"toolset": "claude-code"}, "f": {}}})
    assert config.environment("e").toolset == "claude-code" and config.environment("f").toolset is None
