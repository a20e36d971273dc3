"""`train_config.yaml`: the cookbook's schema, unchanged, plus this library's keys.

```yaml
environments:
  GeneralReasoning/WhoDunIt:          # cookbook keys
    splits: [train]
    num_samples: null                 # cap on tasks per split
    nonterminal_reward: 0.0           # appended when the environment did not finish the episode
    reward_reduction: sum             # sum | mean | max | min | last | discounted, a registered name, or module:Class
    min_reward: null
    max_reward: null
    max_turns: 20
    secrets: {}
    variant: null                     # ours: environment class on a multi-environment server
    base_url: null                    # ours: this environment's server
    context_policy: clear_then_summarize  # ours: at 80% of the window clear old tool outputs, summarise when that is not enough
                                      #   (docs/training.md); none | clear_tool_outputs | summarize | a registered name | module:factory,
                                      #   or {name: clear_then_summarize, threshold: 0.8, clear_target: 0.5, summary_tokens: 1024}
    max_compactions: null             # ours: cap on context boundaries per episode (null: none; a stall guard stops compaction that cannot keep up)
    toolset: null                     # ours: a session toolset of the SDK (claude-code, codex, gemini-cli, hermes, openclaw, backsearch)
    tool_timeout: null                # ours: seconds one tool call of this environment may take (null: the run's tool_timeout)
    tool_timeouts: {}                 # ours: per tool name, e.g. {run_tests: 1800}
secrets:
  openai_api_key: null                # null: read OPENAI_API_KEY
  judge_key: {value: null, domains: [api.judge.example]}   # names the SDK does not know need their hosts
system_prompt_template: null          # may contain {tools}; then write literal braces as {{ }}
thinking: false
openreward_run_name: openreward-rl
# ours
plugins: []                           # modules or files imported first (e.g. ones that register a parser or a reducer)
parser: null                          # null: the model family's parser; else a registered name or module:Class
model_family: null                    # null: chosen from the model name / chat template (docs/families.md); "generic": template-derived only; or module:FAMILY
episode: null                         # null: the tool-calling loop (ToolEpisode); else a registered name or module:builder
check_model: true                     # prove the family token-exact on this tokenizer before the first episode (docs/families.md)
tool_preamble: true                   # a template that drops `tools`: write them into the system prompt in the parser's call format; false: replies need no tools shown
tool_call_example: false              # the preamble adds one worked call of the first tool (placeholder arguments)
tool_execution: sequential            # or parallel
on_no_tool_call: nudge                # or end
train_thinking: true
max_tool_output_tokens: 8192
upload: true
env_base_url: null                    # e.g. http://127.0.0.1:8080 for local environments
tool_timeout: 900                     # seconds one tool call may take (sandbox test runs take up to 600); null: no limit
advantage:                            # how rewards become per-token advantages (docs/training.md, "Credit")
  estimator: episode                  # episode (one reward per episode) | turn | turn_index (per-turn returns) | mix
  gamma: 1.0                          # discount of the per-turn returns (reward-to-go)
  mix_weight: 0.5                     # mix: weight of the turn estimator (the rest: episode)
  clip: null                          # turn / turn_index / mix: cap |advantage| at this (each has a bound without it)
task_sampling: null                   # {window: 2, floor: 0.1}: skip tasks whose last `window` groups had no reward spread (docs/training.md)
resample_zero_spread: 0               # TRL: rerun groups that would train nothing, at most this many rounds per step (0: off)
concurrency: static                   # Slime/Miles: episodes in flight; auto: from the engines' KV-cache load (docs/training.md),
                                      #   or {mode: auto, floor: 8, ceiling: null, poll_interval: 0.5}
```

Your own parser, reducer, episode, context policy or model family is named the same way everywhere
(`openreward_rl._registry.Registry.resolve`): a name registered in this process (a module in
`plugins:` may register it), `package.module:attribute`, or `path/to/file.py:attribute` (a relative
path is taken from the working directory and stored absolute). Parser, reducer, family and the system
prompt are checked here, at load; the episode and context policies by `loop.rollout.check_extensions`
(every command runs it before loading a model). docs/training.md, "Your own parts".
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import attrs
import yaml

from openreward_rl._registry import import_plugin, is_file_spec
from openreward_rl.errors import ConfigError
from openreward_rl.parsers import get_parser
from openreward_rl.redaction import register_secrets
from openreward_rl.reducers.base import RewardPolicy, get_reducer

__all__ = [
    "ConfigError",
    "prepare_config",
    "AdvantageSettings",
    "TaskSamplingSettings",
    "ConcurrencySettings",
    "ADVANTAGE_ESTIMATORS",
    "EnvironmentConfig",
    "TrainConfig",
    "ToolTimeouts",
    "DEFAULT_TOOL_TIMEOUT_S",
    "SESSION_TOOLSETS",
    "load_config",
    "config_path",
    "parse_config",
]


ADVANTAGE_ESTIMATORS = ("episode", "turn", "turn_index", "mix")
# The context policy of an environment whose config names none (openreward_rl.loop.context.ClearThenSummarize).
DEFAULT_CONTEXT_POLICY = "clear_then_summarize"
# Seconds one tool call may take unless the config says otherwise: sandbox environments run test suites
# for up to 600 s inside one call, with room to spare.
DEFAULT_TOOL_TIMEOUT_S = 900.0


def _session_toolsets() -> tuple[str, ...]:
    from typing import get_args

    from openreward.api.environments.client import BuiltinToolset

    return get_args(BuiltinToolset)


# The toolsets an SDK session can be asked for by name (`AsyncEnvironment.session(toolset=...)`).
SESSION_TOOLSETS = _session_toolsets()


@attrs.frozen
class ToolTimeouts:
    """How long each tool call of one environment may take, and which config key says so.

    >>> timeouts = ToolTimeouts(300.0, {"run_tests": 1800.0}, default_key="environments.E.tool_timeout", environment="E")
    >>> timeouts.seconds("run_tests"), timeouts.seconds("read")
    (1800.0, 300.0)
    >>> timeouts.knob("read")
    'environments.E.tool_timeout (300s), or environments.E.tool_timeouts.read for this tool alone'
    """

    default: float | None = DEFAULT_TOOL_TIMEOUT_S
    per_tool: Mapping[str, float] = attrs.field(factory=dict)
    default_key: str = "tool_timeout"
    environment: str = ""

    def seconds(self, tool: str | None) -> float | None:
        """The limit of one call of `tool` (None: the environment's default); None means no limit."""
        if tool is not None and tool in self.per_tool:
            return self.per_tool[tool]
        return self.default

    def knob(self, tool: str | None) -> str:
        """The config key that set the limit of `tool`, for the message of a call it cut."""
        if tool is not None and tool in self.per_tool:
            return f"environments.{self.environment}.tool_timeouts.{tool} ({self.per_tool[tool]:g}s)"
        limit = "no limit" if self.default is None else f"{self.default:g}s"
        alone = (
            f", or environments.{self.environment}.tool_timeouts.{tool} for this tool alone"
            if tool and self.environment
            else ""
        )
        return f"{self.default_key} ({limit}){alone}"


@attrs.frozen
class AdvantageSettings:
    """The run's advantage estimator (`advantage:` in the config).

    - `episode`: one reward per episode, group-normalised by the trainer (GRPO; the default);
    - `turn`: each turn's tokens get that turn's return (reward-to-go, discounted by `gamma`) less the
      group's mean return from the start, over the pooled spread of the group's returns;
    - `turn_index`: the same return less a leave-one-out baseline per turn index;
    - `mix`: `mix_weight` × turn + (1 − `mix_weight`) × episode;
    - `clip`: cap on |advantage| for the per-token estimators (None: none; each has a bound anyway).

    Baselines, scales, biases and bounds: `openreward_rl.credit.estimators` and docs/training.md, "Credit".
    """

    estimator: str = "episode"
    gamma: float = 1.0
    mix_weight: float = 0.5
    clip: float | None = None

    @property
    def per_token(self) -> bool:
        """Whether the trainer needs our advantage hooks (anything but `episode`)."""
        return self.estimator != "episode"


@attrs.frozen
class ConcurrencySettings:
    """Slime/Miles: how many episodes one hook process keeps in flight (`concurrency:`). "static": as many as
    the trainer starts (its `--sglang-server-concurrency` per engine); "auto": grown and trimmed between
    `floor` and `ceiling` from the engines' KV-cache load, polled every `poll_interval` seconds
    (`openreward_rl.engines.admission`). `ceiling` None: the trainer's own limit."""

    mode: str = "static"
    floor: int = 8
    ceiling: int | None = None
    poll_interval: float = 0.5

    @property
    def adaptive(self) -> bool:
        return self.mode == "auto"


@attrs.frozen
class TaskSamplingSettings:
    """The online sampler (`task_sampling:`): a task whose last `window` groups all had zero reward spread
    is skipped with probability `1 - floor` (`openreward_rl.backends.task_sampling`)."""

    window: int = 2
    floor: float = 0.1


@attrs.frozen
class EnvironmentConfig:
    name: str
    splits: tuple[str, ...] = ("train",)
    num_samples: int | None = None
    nonterminal_reward: float | None = None
    reward_reduction: str = "sum"
    discount: float = 0.99
    min_reward: float | None = None
    max_reward: float | None = None
    max_turns: int = 20
    secrets: Mapping[str, str | None] = attrs.field(factory=dict)
    secret_domains: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict)
    variant: str | None = None
    base_url: str | None = None
    context_policy: str = DEFAULT_CONTEXT_POLICY
    context_policy_options: Mapping[str, Any] = attrs.field(factory=dict)
    context_policy_chosen: bool = (
        False  # the config names a policy (else the default, which some rollout paths turn off)
    )
    max_compactions: int | None = (
        None  # None: no cap, the loop's stall guard ends an episode compaction cannot keep going
    )
    toolset: str | None = None
    tool_timeout: float | None = None  # None: the run's `tool_timeout`
    tool_timeouts: Mapping[str, float] = attrs.field(factory=dict)

    @property
    def compacts(self) -> bool:
        """Whether episodes of this environment may be cut into several contexts (several samples)."""
        return self.context_policy != "none" and self.max_compactions != 0

    def without_default_compaction(self) -> EnvironmentConfig:
        """This environment with `context_policy: none` where the config left the policy at its default."""
        return (
            self if self.context_policy_chosen else attrs.evolve(self, context_policy="none", context_policy_options={})
        )

    def reward_policy(self) -> RewardPolicy:
        options = {"gamma": self.discount} if self.reward_reduction == "discounted" else {}
        return RewardPolicy(
            get_reducer(self.reward_reduction, **options),
            nonterminal_reward=self.nonterminal_reward,
            min_reward=self.min_reward,
            max_reward=self.max_reward,
        )


@attrs.frozen
class TrainConfig:
    environments: Mapping[str, EnvironmentConfig]
    secrets: Mapping[str, str | None] = attrs.field(factory=dict)
    secret_domains: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict)
    system_prompt_template: str | None = None
    thinking: bool = False
    openreward_run_name: str = "openreward-rl"
    plugins: tuple[str, ...] = ()
    parser: str | None = None
    model_family: str | None = None
    episode: str | None = None
    check_model: bool = True
    tool_preamble: bool = True
    tool_call_example: bool = False
    tool_execution: Literal["sequential", "parallel"] = "sequential"
    on_no_tool_call: Literal["nudge", "end"] = "nudge"
    nudge_message: str | None = None
    train_thinking: bool = True
    max_tool_output_tokens: int | None = 8192
    upload: bool = True
    env_base_url: str | None = None
    chat_template_kwargs: Mapping[str, Any] = attrs.field(factory=dict)
    attempts: int = 2
    tool_timeout: float | None = DEFAULT_TOOL_TIMEOUT_S
    episode_timeout: float | None = None
    # Partial rollout: how long a suspended episode keeps its environment session open, and how many may wait.
    suspended_episode_ttl: float = 1800.0
    max_suspended_episodes: int = 1024
    # A model call cut by an abort the trainer did not order (a weight update's /pause_generation under
    # fully-async rollout) is continued in place at most this many times; 0: such a call ends the episode ABORTED.
    max_turn_continuations: int = 3
    # Episodes in worker processes (or Ray actors) instead of the hook's process; 0: in process.
    rollout_workers: int = 0
    rollout_worker_backend: str = "auto"
    advantage: AdvantageSettings = attrs.field(factory=AdvantageSettings)
    task_sampling: TaskSamplingSettings | None = None
    concurrency: ConcurrencySettings = attrs.field(factory=ConcurrencySettings)
    # TRL: rounds of rerunning a step's groups whose episodes would all train nothing (0: off).
    resample_zero_spread: int = 0
    source: str = "<config>"

    def environment(self, name: str) -> EnvironmentConfig:
        try:
            return self.environments[name]
        except KeyError:
            raise ConfigError(
                f"{self.source}: environment {name!r} is not configured; configured: {', '.join(self.environments)}"
            ) from None

    @property
    def compacts(self) -> bool:
        """Whether any environment's episodes may be cut into several contexts (fan-out samples)."""
        return any(e.compacts for e in self.environments.values())

    def without_default_compaction(self) -> TrainConfig:
        """The config for a rollout path that cannot carry an episode's several contexts (partial rollout, Miles'
        session server): every environment left at the default context policy gets `none`; one that names
        a policy keeps it (and the path refuses it).

        >>> config = parse_config({"environments": {"A": {}, "B": {"context_policy": "summarize"}}})
        >>> {n: e.context_policy for n, e in config.without_default_compaction().environments.items()}
        {'A': 'none', 'B': 'summarize'}
        """
        return attrs.evolve(
            self, environments={n: e.without_default_compaction() for n, e in self.environments.items()}
        )

    def nonterminal_reward(self, name: str) -> float | None:
        """The `nonterminal_reward` of environment `name`; None for one the config does not name."""
        environment = self.environments.get(name)
        return None if environment is None else environment.nonterminal_reward

    def tool_timeouts(self, name: str) -> ToolTimeouts:
        """The tool-call limits of environment `name`: its `tool_timeouts` per tool, else its `tool_timeout`,
        else the run's."""
        environment = self.environment(name)
        if environment.tool_timeout is not None:
            default: float | None = environment.tool_timeout
            key = f"environments.{name}.tool_timeout"
        else:
            default, key = self.tool_timeout, "tool_timeout"
        return ToolTimeouts(default, dict(environment.tool_timeouts), default_key=key, environment=name)

    def base_url_for(self, name: str) -> str | None:
        return self.environment(name).base_url or self.env_base_url

    def run_name(self) -> str:
        return os.environ.get("OPENREWARD_RUN_NAME") or self.openreward_run_name

    def resolve_secrets(self, name: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """Secrets for one environment: env-specific > global > environment variables (the cookbook's rule).

        A null (or, globally, empty) value reads the environment variable of the same name (upper-cased
        first, then as written); an environment-specific empty string drops the key (a global secret
        this environment must not get). A secret configured to be read from the environment whose
        variable is unset is a `ConfigError` naming it: a run without it would fail later, in the
        environment, as an infrastructure fault. Every value resolved is registered for redaction
        (`openreward_rl.redaction`) here, where config secrets enter the process.
        """
        environ = os.environ if environ is None else environ

        def from_environ(key: str, where: str) -> str:
            value = environ.get(key.upper()) or environ.get(key)
            if not value:
                variables = " or ".join(dict.fromkeys([key.upper(), key]))
                raise ConfigError(
                    f"{self.source}: {where}.{key} is configured to be read from the environment, but {variables} is not set; "
                    f"set it, or remove the secret from the config"
                )
            return value

        resolved: dict[str, str] = {}
        overridden = self.environment(name).secrets
        for key, value in self.secrets.items():
            if key not in overridden:
                resolved[key] = value or from_environ(key, "secrets")
        for key, value in overridden.items():
            if value is None:
                resolved[key] = from_environ(key, f"environments.{name}.secrets")
            elif value:
                resolved[key] = value
        register_secrets(resolved)
        return resolved

    def session_secrets(
        self, name: str, environ: Mapping[str, str] | None = None
    ) -> dict[str, str | tuple[str, list[str]]]:
        """`resolve_secrets` in the SDK's form: a secret with configured domains as (value, domains)."""
        domains = {**self.secret_domains, **self.environment(name).secret_domains}
        return {
            key: (value, list(domains[key])) if key in domains else value
            for key, value in self.resolve_secrets(name, environ).items()
        }


_ENV_KEYS = {f.name for f in attrs.fields(EnvironmentConfig)} - {
    "name",
    "secret_domains",
    "context_policy_options",
    "context_policy_chosen",
}
GENERIC_FAMILY = "generic"  # model_family value: the template-derived bridge, no family's stop tokens
# "0" in a training job's environment (`openreward-rl train --skip-check-model`): its hooks run with check_model false
CHECK_MODEL_ENV = "OPENREWARD_RL_CHECK_MODEL"
_TOP_KEYS = {f.name for f in attrs.fields(TrainConfig)} - {"source", "secret_domains"}


def check_family_name(name: str, where: str) -> str:
    """`name` if it is a supported model family or "generic"; ConfigError naming the supported ones."""
    from openreward_rl.families import UnsupportedModelError, get_family

    if name == GENERIC_FAMILY:
        return name
    try:
        get_family(name)
    except UnsupportedModelError as error:
        raise ConfigError(f"{where}: {error}") from None
    return name


def _unknown(key: str, known: set[str], where: str) -> ConfigError:
    close = difflib.get_close_matches(key, sorted(known), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(sorted(known))}"
    return ConfigError(f"{where}: unknown key {key!r}{hint}")


def _check(
    value: Any,
    kinds: tuple[type[Any], ...],
    where: str,
    what: str,
    *,
    optional: bool = False,
    minimum: int | None = None,
) -> Any:
    """`value` where it is one of `kinds` (None too where `optional`; a number at least `minimum` where given);
    else a `ConfigError`: `{where}: must be {what}, got {value!r}`."""
    if value is None and optional:
        return None
    if isinstance(value, bool) and bool not in kinds:
        raise ConfigError(f"{where}: must be {what}, got {value!r}")
    if not isinstance(value, kinds) or (minimum is not None and value < minimum):
        raise ConfigError(f"{where}: must be {what}, got {value!r}")
    return value


_RESERVED_SECRETS = {"api_key", "OPENREWARD_API_KEY"}  # the SDK fills these with the client's API key


def _well_known_secrets() -> set[str]:
    from openreward.api.sandboxes.secrets import WELL_KNOWN_SECRETS

    return set(WELL_KNOWN_SECRETS)


def _secrets(raw: Any, where: str) -> tuple[dict[str, str | None], dict[str, tuple[str, ...]]]:
    """Secret values (null reads the environment variable) and, for any secret, its allowed domains.

    A value is a string, null, or `{value: <string or null>, domains: [host, ...]}`. The SDK knows the
    domains of well-known names (openai_api_key, OPENAI_API_KEY, ...); any other name needs `domains`.
    """
    raw = {} if raw is None else raw
    _check(raw, (dict,), where, "a mapping of secret names to values (null reads the environment variable)")
    values: dict[str, str | None] = {}
    domains: dict[str, tuple[str, ...]] = {}
    for key, value in raw.items():
        if key in _RESERVED_SECRETS:
            raise ConfigError(
                f"{where}.{key}: {key!r} is reserved: the SDK sends the OpenReward API key under that name; rename the secret"
            )
        if isinstance(value, dict):
            unknown = set(value) - {"value", "domains"}
            if unknown:
                raise ConfigError(
                    f"{where}.{key}: unknown key {sorted(unknown)[0]!r}; a secret mapping has 'value' and 'domains'"
                )
            values[key] = _check(value.get("value"), (str,), f"{where}.{key}.value", "a string or null", optional=True)
            hosts = value.get("domains")
            if not isinstance(hosts, list) or not hosts or not all(isinstance(h, str) and h for h in hosts):
                raise ConfigError(
                    f"{where}.{key}.domains: must be a non-empty list of host names the secret may be sent to"
                )
            domains[key] = tuple(hosts)
        else:
            values[key] = _check(value, (str,), f"{where}.{key}", "a string, null, or {value, domains}", optional=True)
            if key not in _well_known_secrets():
                raise ConfigError(
                    f"{where}.{key}: the OpenReward SDK does not know which hosts {key!r} may reach; "
                    f"write it as {key}: {{value: null, domains: [api.example.com]}}"
                )
    return values, domains


def _seconds(raw: Any, where: str) -> float:
    """A positive number of seconds, as a float; ConfigError naming `where` otherwise."""
    value = _check(raw, (int, float), where, "a positive number of seconds")
    if value <= 0:
        raise ConfigError(f"{where}: must be a positive number of seconds, got {value!r}")
    return float(value)


def _spec(raw: Any, where: str, what: str) -> str:
    """A name of an extension (parser, reducer, episode, context policy, family), with a relative
    `file.py:attribute` made absolute (from the working directory) so that every process of the run
    imports the same file.

    >>> _spec("sum", "reward_reduction", "a name"), _spec("/abs/mine.py:Mine", "parser", "a name")
    ('sum', '/abs/mine.py:Mine')
    """
    name = _check(raw, (str,), where, what)
    if not name.strip():
        raise ConfigError(f"{where}: must be {what}, got an empty string")
    location, sep, attribute = name.rpartition(":")
    if sep and is_file_spec(location):
        return f"{Path(location).resolve()}:{attribute}"
    return name


def _plugins(raw: Any, where: str) -> tuple[str, ...]:
    """`plugins:`: each module (`package.module`) or file (`path/to/file.py`, made absolute) imported now."""
    if isinstance(raw, str):
        raw = [raw]
    _check(raw, (list,), where, "a list of modules or .py files to import first")
    plugins = []
    for item in raw:
        name = _check(item, (str,), where, "a list of modules or .py files to import first")
        try:
            import_plugin(name)
        except ValueError as error:
            raise ConfigError(f"{where}: {error}") from None
        plugins.append(str(Path(name).resolve()) if is_file_spec(name) else name)
    return tuple(plugins)


def fill_system_prompt(template: str | None, tools: str) -> str | None:
    """The system prompt: `template` with `tools` (one JSON line per tool) for its `{tools}` placeholder;
    a template without `{tools}` is taken as written. ValueError for a template `str.format` cannot fill.

    >>> fill_system_prompt("Tools: {tools}", '{"name": "f"}')
    'Tools: {"name": "f"}'
    >>> fill_system_prompt('Call as {"name": ...}', "") # no {tools}: literal braces are fine
    'Call as {"name": ...}'
    >>> fill_system_prompt('{tools} Call as {"name": ...}', "")
    Traceback (most recent call last):
    ...
    ValueError: only {tools} may be a placeholder; write other braces doubled, {{ and }} (KeyError: '"name"')
    """
    if not template or "{tools}" not in template:
        return template or None
    try:
        return template.format(tools=tools)
    except (KeyError, IndexError, ValueError) as error:
        raise ValueError(
            f"only {{tools}} may be a placeholder; write other braces doubled, {{{{ and }}}} ({type(error).__name__}: {error})"
        ) from None


def _context_policy(raw: Any, where: str) -> tuple[str, dict[str, Any]]:
    """A policy name, or a mapping with `name` and the policy's options. The policy itself is built (and
    its options checked) where the loop is: `Rollouts.from_config` turns its errors into ConfigError."""
    if raw is None:
        return "none", {}
    if isinstance(raw, str):
        name, options = raw, {}
    elif isinstance(raw, dict):
        options = dict(raw)
        name = options.pop("name", None)
        if not isinstance(name, str):
            raise ConfigError(
                f"{where}.name: a context policy mapping needs a 'name' (clear_then_summarize, none, clear_tool_outputs, summarize or module:factory)"
            )
    else:
        raise ConfigError(f"{where}: must be a policy name or a mapping with 'name' and its options, got {raw!r}")
    if not name.strip():
        raise ConfigError(f"{where}: the policy name is empty")
    if name == "none" and options:
        raise ConfigError(f"{where}: 'none' takes no options")
    return _spec(name, where, "a policy name"), options


def _environment(name: str, raw: Any, source: str) -> EnvironmentConfig:
    where = f"{source}: environments.{name}"
    raw = {} if raw is None else raw
    _check(raw, (dict,), where, "a mapping of settings")
    for key in raw:
        if key not in _ENV_KEYS:
            raise _unknown(key, _ENV_KEYS, where)
    values: dict[str, Any] = {"name": name}
    if "splits" in raw:
        splits = raw["splits"]
        if isinstance(splits, str):
            splits = [splits]
        _check(splits, (list,), f"{where}.splits", "a list of split names")
        if not splits or not all(isinstance(s, str) and s for s in splits):
            raise ConfigError(f"{where}.splits: must be a non-empty list of split names, got {raw['splits']!r}")
        values["splits"] = tuple(splits)
    for key in ("nonterminal_reward", "min_reward", "max_reward"):
        if key in raw:
            values[key] = _check(raw[key], (int, float), f"{where}.{key}", "a number or null", optional=True)
            values[key] = None if values[key] is None else float(values[key])
    if "num_samples" in raw:
        values["num_samples"] = _check(
            raw["num_samples"], (int,), f"{where}.num_samples", "a positive integer or null", optional=True, minimum=1
        )
    if "max_turns" in raw:
        values["max_turns"] = _check(raw["max_turns"], (int,), f"{where}.max_turns", "a positive integer", minimum=1)
    if "discount" in raw:
        discount = _check(raw["discount"], (int, float), f"{where}.discount", "a number in [0, 1]")
        if not 0 <= discount <= 1:
            raise ConfigError(f"{where}.discount: must be in [0, 1], got {discount!r}")
        values["discount"] = float(discount)
    if "reward_reduction" in raw:
        values["reward_reduction"] = _spec(
            raw["reward_reduction"], f"{where}.reward_reduction", "a reduction name or module:Class"
        )
    for key in ("variant", "base_url"):
        if key in raw:
            values[key] = _check(raw[key], (str,), f"{where}.{key}", "a string or null", optional=True)
    if "secrets" in raw:
        values["secrets"], values["secret_domains"] = _secrets(raw["secrets"], f"{where}.secrets")
    if "context_policy" in raw:
        values["context_policy"], values["context_policy_options"] = _context_policy(
            raw["context_policy"], f"{where}.context_policy"
        )
        values["context_policy_chosen"] = True
    if "max_compactions" in raw:
        values["max_compactions"] = _check(
            raw["max_compactions"],
            (int,),
            f"{where}.max_compactions",
            "a non-negative integer or null",
            optional=True,
            minimum=0,
        )
    if raw.get("toolset") is not None:
        toolset = _check(raw["toolset"], (str,), f"{where}.toolset", "a toolset name or null")
        if toolset not in SESSION_TOOLSETS:
            raise ConfigError(
                f"{where}.toolset: unknown toolset {toolset!r}; the SDK's session toolsets are: {', '.join(SESSION_TOOLSETS)}"
            )
        values["toolset"] = toolset
    if raw.get("tool_timeout") is not None:
        values["tool_timeout"] = _seconds(raw["tool_timeout"], f"{where}.tool_timeout")
    if raw.get("tool_timeouts") is not None:
        per_tool = _check(raw["tool_timeouts"], (dict,), f"{where}.tool_timeouts", "a mapping of tool names to seconds")
        values["tool_timeouts"] = {
            str(tool): _seconds(value, f"{where}.tool_timeouts.{tool}") for tool, value in per_tool.items()
        }
    config = EnvironmentConfig(**values)
    if config.min_reward is not None and config.max_reward is not None and config.min_reward > config.max_reward:
        raise ConfigError(f"{where}: min_reward ({config.min_reward}) is greater than max_reward ({config.max_reward})")
    try:
        config.reward_policy()  # builds the reducer: an unknown or unfit one is refused here, with the known names
    except ValueError as error:
        raise ConfigError(f"{where}.reward_reduction: {error}") from None
    return config


def parse_config(raw: Any, *, source: str = "<config>") -> TrainConfig:
    """Validate a loaded YAML document. Every problem is a `ConfigError` naming the key."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: the config must be a YAML mapping with an 'environments' key")
    for key in raw:
        if key not in _TOP_KEYS:
            raise _unknown(key, _TOP_KEYS, source)
    environments = raw.get("environments")
    if not environments or not isinstance(environments, dict):
        raise ConfigError(
            f"{source}: 'environments' must map at least one environment name (e.g. GeneralReasoning/WhoDunIt) to its settings"
        )
    values: dict[str, Any] = {"source": source}
    if raw.get("plugins") is not None:
        values["plugins"] = _plugins(raw["plugins"], f"{source}: plugins")  # first: they may register the names below
    values["environments"] = {
        str(name): _environment(str(name), settings, source) for name, settings in environments.items()
    }
    if "secrets" in raw:
        values["secrets"], values["secret_domains"] = _secrets(raw["secrets"], f"{source}: secrets")
    for key in ("system_prompt_template", "nudge_message", "env_base_url"):
        if key in raw:
            values[key] = _check(raw[key], (str,), f"{source}: {key}", "a string or null", optional=True)
    for key in ("parser", "model_family", "episode"):
        if raw.get(key) is not None:
            values[key] = _spec(raw[key], f"{source}: {key}", "a registered name or module:attribute")
    if values.get("system_prompt_template"):
        try:
            fill_system_prompt(values["system_prompt_template"], "")
        except ValueError as error:
            raise ConfigError(f"{source}: system_prompt_template: {error}") from None
    if values.get("parser"):
        try:
            get_parser(values["parser"])
        except ValueError as error:
            raise ConfigError(f"{source}: parser: {error}") from None
    if values.get("model_family"):
        values["model_family"] = check_family_name(values["model_family"], f"{source}: model_family")
    if "openreward_run_name" in raw:
        values["openreward_run_name"] = _check(
            raw["openreward_run_name"], (str,), f"{source}: openreward_run_name", "a string"
        )
    for key in ("thinking", "train_thinking", "upload", "check_model", "tool_preamble", "tool_call_example"):
        if key in raw:
            values[key] = _check(raw[key], (bool,), f"{source}: {key}", "true or false")
    for key, options in (
        ("tool_execution", ("sequential", "parallel")),
        ("on_no_tool_call", ("nudge", "end")),
        ("rollout_worker_backend", ("auto", "process", "ray")),
    ):
        if key in raw:
            if raw[key] not in options:
                raise ConfigError(f"{source}: {key}: must be one of {', '.join(options)}, got {raw[key]!r}")
            values[key] = raw[key]
    if "max_tool_output_tokens" in raw:
        values["max_tool_output_tokens"] = _check(
            raw["max_tool_output_tokens"],
            (int,),
            f"{source}: max_tool_output_tokens",
            "a positive integer or null",
            optional=True,
            minimum=1,
        )
    if "attempts" in raw:
        values["attempts"] = _check(raw["attempts"], (int,), f"{source}: attempts", "a positive integer", minimum=1)
    if "resample_zero_spread" in raw:
        values["resample_zero_spread"] = _check(
            raw["resample_zero_spread"],
            (int,),
            f"{source}: resample_zero_spread",
            "a number of rounds (0: off)",
            minimum=0,
        )
    if "rollout_workers" in raw:
        values["rollout_workers"] = _check(
            raw["rollout_workers"], (int,), f"{source}: rollout_workers", "a number of worker processes (0: none)"
        )
        if values["rollout_workers"] < 0:
            raise ConfigError(
                f"{source}: rollout_workers: must be 0 (episodes in the hook's process) or a positive number of workers, got {raw['rollout_workers']!r}"
            )
    if "suspended_episode_ttl" in raw:
        value = _check(
            raw["suspended_episode_ttl"],
            (int, float),
            f"{source}: suspended_episode_ttl",
            "a positive number of seconds",
        )
        if value <= 0:
            raise ConfigError(f"{source}: suspended_episode_ttl: must be a positive number of seconds, got {value!r}")
        values["suspended_episode_ttl"] = float(value)
    if "max_suspended_episodes" in raw:
        values["max_suspended_episodes"] = _check(
            raw["max_suspended_episodes"], (int,), f"{source}: max_suspended_episodes", "a positive integer", minimum=1
        )
    if "max_turn_continuations" in raw:
        value = _check(
            raw["max_turn_continuations"], (int,), f"{source}: max_turn_continuations", "a non-negative integer"
        )
        if value < 0:
            raise ConfigError(
                f"{source}: max_turn_continuations: must be a non-negative integer (0: never continue), got {value!r}"
            )
        values["max_turn_continuations"] = value
    for key in ("tool_timeout", "episode_timeout"):
        if key in raw:
            value = _check(
                raw[key], (int, float), f"{source}: {key}", "a positive number of seconds or null", optional=True
            )
            if value is not None and value <= 0:
                raise ConfigError(f"{source}: {key}: must be a positive number of seconds or null, got {value!r}")
            values[key] = None if value is None else float(value)
    if "chat_template_kwargs" in raw:
        values["chat_template_kwargs"] = _check(
            raw["chat_template_kwargs"] or {}, (dict,), f"{source}: chat_template_kwargs", "a mapping"
        )
    if "advantage" in raw:
        values["advantage"] = _advantage(raw["advantage"], f"{source}: advantage")
    if raw.get("task_sampling") is not None:
        values["task_sampling"] = _task_sampling(raw["task_sampling"], f"{source}: task_sampling")
    if raw.get("concurrency") is not None:
        values["concurrency"] = _concurrency(raw["concurrency"], f"{source}: concurrency")
    return TrainConfig(**values)


def _concurrency(raw: Any, where: str) -> ConcurrencySettings:
    """`concurrency:` validated: "static", "auto" or a mapping (ConfigError naming the key).

    >>> _concurrency("auto", "concurrency")
    ConcurrencySettings(mode='auto', floor=8, ceiling=None, poll_interval=0.5)
    >>> _concurrency({"mode": "auto", "floor": 64, "ceiling": 32}, "concurrency")
    Traceback (most recent call last):
    ...
    openreward_rl.errors.ConfigError: concurrency: floor 64 is above ceiling 32
    """
    if isinstance(raw, str):
        raw = {"mode": raw}
    raw = _settings_mapping(
        raw, ConcurrencySettings, where, "static, auto or a mapping with mode, floor, ceiling and poll_interval"
    )
    mode = raw.get("mode", "auto")
    if mode not in ("static", "auto"):
        raise ConfigError(f"{where}.mode: must be static or auto, got {mode!r}")
    floor = _check(raw.get("floor", 8), (int,), f"{where}.floor", "a positive number of episodes", minimum=1)
    ceiling = _check(
        raw.get("ceiling"),
        (int,),
        f"{where}.ceiling",
        "a positive number of episodes or null",
        optional=True,
        minimum=1,
    )
    interval = _check(
        raw.get("poll_interval", 0.5), (int, float), f"{where}.poll_interval", "a positive number of seconds"
    )
    if interval <= 0:
        raise ConfigError(f"{where}.poll_interval: must be a positive number of seconds, got {interval!r}")
    if ceiling is not None and floor > ceiling:
        raise ConfigError(f"{where}: floor {floor} is above ceiling {ceiling}")
    return ConcurrencySettings(mode=mode, floor=floor, ceiling=ceiling, poll_interval=float(interval))


def _settings_mapping(raw: Any, settings: type, where: str, expected: str) -> dict[str, Any]:
    """`raw` as a mapping of `settings`' fields (ConfigError naming `where` for anything else, or an unknown key)."""
    mapping = _check(raw, (dict,), where, expected)
    known = {f.name for f in attrs.fields(settings)}
    for key in mapping:
        if key not in known:
            raise _unknown(key, known, where)
    return mapping


def _task_sampling(raw: Any, where: str) -> TaskSamplingSettings:
    """`task_sampling:` validated (ConfigError naming the key).

    >>> _task_sampling({"floor": 0.0}, "task_sampling")
    Traceback (most recent call last):
    ...
    openreward_rl.errors.ConfigError: task_sampling.floor: must be in (0, 1] so that no task starves, got 0.0
    """
    raw = _settings_mapping(raw, TaskSamplingSettings, where, "a mapping with window and floor")
    window = _check(raw.get("window", 2), (int,), f"{where}.window", "a positive integer", minimum=1)
    floor = _check(raw.get("floor", 0.1), (int, float), f"{where}.floor", "a number in (0, 1]")
    if isinstance(floor, bool) or not 0.0 < floor <= 1.0:
        raise ConfigError(f"{where}.floor: must be in (0, 1] so that no task starves, got {floor!r}")
    return TaskSamplingSettings(window=window, floor=float(floor))


def _advantage(raw: Any, where: str) -> AdvantageSettings:
    """`advantage:` validated; every problem is a ConfigError naming the key.

    >>> _advantage({"estimator": "mix", "mix_weight": 0.25}, "advantage")
    AdvantageSettings(estimator='mix', gamma=1.0, mix_weight=0.25, clip=None)
    >>> _advantage({"estimator": "td"}, "advantage")
    Traceback (most recent call last):
    ...
    openreward_rl.errors.ConfigError: advantage.estimator: must be one of episode, turn, turn_index, mix, got 'td'
    """
    if raw is None:
        return AdvantageSettings()
    raw = _settings_mapping(raw, AdvantageSettings, where, "a mapping with estimator, gamma, mix_weight, clip")
    estimator = raw.get("estimator", "episode")
    if estimator not in ADVANTAGE_ESTIMATORS:
        raise ConfigError(f"{where}.estimator: must be one of {', '.join(ADVANTAGE_ESTIMATORS)}, got {estimator!r}")
    gamma = _check(raw.get("gamma", 1.0), (int, float), f"{where}.gamma", "a number in [0, 1]")
    if isinstance(gamma, bool) or not 0.0 <= gamma <= 1.0:
        raise ConfigError(f"{where}.gamma: must be a number in [0, 1], got {gamma!r}")
    weight = _check(raw.get("mix_weight", 0.5), (int, float), f"{where}.mix_weight", "a number in [0, 1]")
    if isinstance(weight, bool) or not 0.0 <= weight <= 1.0:
        raise ConfigError(f"{where}.mix_weight: must be a number in [0, 1], got {weight!r}")
    if "mix_weight" in raw and estimator != "mix":
        raise ConfigError(f"{where}.mix_weight: only the mix estimator has a weight (estimator is {estimator!r})")
    clip = raw.get("clip")
    if clip is not None:
        clip = _check(clip, (int, float), f"{where}.clip", "a positive number or null")
        if isinstance(clip, bool) or not clip > 0:
            raise ConfigError(f"{where}.clip: must be a positive number or null, got {clip!r}")
        if estimator == "episode":
            raise ConfigError(
                f"{where}.clip: the episode estimator is the trainer's own GRPO (bounded by (n-1)/sqrt(n)); clip applies to turn, turn_index and mix"
            )
        clip = float(clip)
    return AdvantageSettings(estimator=estimator, gamma=float(gamma), mix_weight=float(weight), clip=clip)


def config_path(path: str | os.PathLike[str] | None = None) -> Path:
    """The config file: `path`, else $OPENREWARD_RL_CONFIG, else $TRAIN_CONFIG (the cookbook's), else ./train_config.yaml."""
    chosen = path or os.environ.get("OPENREWARD_RL_CONFIG") or os.environ.get("TRAIN_CONFIG") or "train_config.yaml"
    return Path(chosen)


def load_config(path: str | os.PathLike[str] | None = None) -> TrainConfig:
    """Load and validate the training config.

    >>> import tempfile, pathlib
    >>> file = pathlib.Path(tempfile.mkdtemp()) / "train_config.yaml"
    >>> _ = file.write_text("environments:\\n  GeneralReasoning/WhoDunIt:\\n    reward_reduction: avg\\n")
    >>> load_config(file)
    Traceback (most recent call last):
    ...
    openreward_rl.errors.ConfigError: ...environments.GeneralReasoning/WhoDunIt.reward_reduction: unknown reward reduction 'avg'; choose one of: ...discounted, last, max, mean, min, sum; or name your own as package.module:attribute or path/to/file.py:attribute
    """  # noqa: E501  (the doctest's expected error is one line)
    file = config_path(path)
    if not file.exists():
        raise ConfigError(f"config file {file} does not exist (set --config, OPENREWARD_RL_CONFIG or TRAIN_CONFIG)")
    try:
        raw = yaml.safe_load(file.read_text())
    except yaml.YAMLError as error:
        raise ConfigError(f"{file}: not valid YAML: {error}") from None
    return parse_config(raw, source=str(file))


def prepare_config(
    config: TrainConfig,
    *,
    split: str | None = None,
    served: Mapping[str, str] | None = None,
    base_url: str | None = None,
    family: str | None = None,
    skip_check_model: bool = False,
) -> TrainConfig:
    """The config as this run uses it: `--split` replaces every environment's splits; with `--serve`,
    `env_base_url` points at the local server and an environment whose name matches a served class
    (by its variant, the lowercased class name) gets that variant; `--family` replaces `model_family`;
    `--skip-check-model` sets `check_model: false`.
    """
    environments = {}
    for name, env in config.environments.items():
        if split:
            env = attrs.evolve(env, splits=(split,))
        if served and env.variant is None:
            variant = served.get(name.split("/")[-1].lower())
            if variant is not None:
                env = attrs.evolve(env, variant=variant)
        environments[name] = env
    changes: dict[str, Any] = {"environments": environments}
    if base_url:
        changes["env_base_url"] = base_url
    if family:
        changes["model_family"] = family
    if skip_check_model:
        changes["check_model"] = False
    return attrs.evolve(config, **changes)
