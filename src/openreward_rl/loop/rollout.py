"""`Rollouts`: everything one process needs to run configured episodes (engine, tokenizer, parser, SDK client)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

import attrs

from openreward_rl._registry import Registry
from openreward_rl.config import ConfigError, TrainConfig
from openreward_rl.engines.base import Engine
from openreward_rl.env.repeats import OncePerKey
from openreward_rl.env.tasks import TaskRef, resolve_task
from openreward_rl.families.base import ModelFamily
from openreward_rl.families.chat import ChatRenderer
from openreward_rl.families.tool_preamble import needs_no_preamble, parser_preamble
from openreward_rl.loop.context import ContextPolicy, context_policy
from openreward_rl.loop.episode import DEFAULT_NUDGE, Episode, EpisodeSettings, has_tools_placeholder, run_episode
from openreward_rl.loop.tool_episode import ToolEpisode
from openreward_rl.loop.trajectory import Trajectory
from openreward_rl.parsers.base import ToolParser, get_parser

__all__ = [
    "EpisodeBuilder",
    "Rollouts",
    "available_episodes",
    "check_engine_reads_images",
    "check_extensions",
    "check_tools_shown",
    "choose_family",
    "choose_parser",
    "close_episode_builder",
    "context_policies",
    "episode_builder",
    "episode_stack",
    "register_episode",
    "resolve_task",
]


logger = logging.getLogger(__name__)
# (family, parser) pairs already warned of: the family's preamble teaches calls the parser does not read
_WARNED_UNTAUGHT = OncePerKey()


class EpisodeBuilder(Protocol):
    """Builds the Episode of one run from the runner's parts: the engine, the renderer and parser the
    config gives the model, and the environment's `EpisodeSettings`. `ToolEpisode` is one (the default);
    a custom Episode passes a builder to `Rollouts.from_config` and gets the config's reward policy,
    retries, timeouts and secrets from the runner without writing them. A builder that holds something
    open across episodes (`agent_episode_builder`'s endpoints) defines `async aclose()`; the runner's
    owner calls it when it closes (`close_episode_builder`)."""

    def __call__(
        self,
        engine: Engine,
        renderer: ChatRenderer,
        parser: ToolParser,
        settings: EpisodeSettings,
        *,
        routing_key: str | None = None,
    ) -> Episode: ...


_EPISODES: Registry[EpisodeBuilder] = Registry(
    duplicate="an episode named {name!r} is already registered",
    unknown="unknown episode {name!r}; choose one of: {known}",
)
_EPISODES["tool"] = ToolEpisode


def register_episode(name: str, builder: EpisodeBuilder) -> EpisodeBuilder:
    """Make `builder` usable as `episode: name` in the config (a name is registered once)."""
    return _EPISODES.register(name)(builder)


def available_episodes() -> list[str]:
    return _EPISODES.names()


def episode_builder(name: str | None) -> EpisodeBuilder:
    """The `EpisodeBuilder` the config's `episode` names: None or "tool" for `ToolEpisode`, a registered name,
    or `package.module:builder` / `path/to/file.py:Class.build`. ValueError names an unknown or unfit one.

    >>> episode_builder(None) is episode_builder("tool") is ToolEpisode
    True
    >>> episode_builder("math:pi")
    Traceback (most recent call last):
    ...
    ValueError: episode 'math:pi' is 3.141592653589793, not an EpisodeBuilder (a callable taking engine, renderer, parser, settings)
    """
    builder = ToolEpisode if name is None else _EPISODES.resolve(name)
    if not callable(builder):
        raise ValueError(
            f"episode {name!r} is {builder!r}, not an EpisodeBuilder (a callable taking engine, renderer, parser, settings)"
        )
    return builder


async def close_episode_builder(builder: EpisodeBuilder) -> None:
    """Close what `builder` holds open across episodes, where it defines `aclose` (an instance's; a class
    builder such as `ToolEpisode` holds nothing)."""
    closer = None if isinstance(builder, type) else getattr(builder, "aclose", None)
    if closer is not None:
        await closer()


def check_extensions(config: TrainConfig) -> None:
    """ConfigError for an unknown or unfit episode or context policy: what `parse_config` (a lower layer)
    cannot look up. Runs before any model loads (`preflight.check_ready` and `--dry-run` call it)."""
    context_policies(config)
    try:
        episode_builder(config.episode)
    except ValueError as error:
        raise ConfigError(f"{config.source}: episode: {error}") from None


def choose_parser(
    config: TrainConfig, model: str | None, tokenizer: Any, family: ModelFamily | None = None
) -> ToolParser:
    """The configured parser, else `family`'s, else the one the model name or chat template implies."""
    if config.parser:
        return get_parser(config.parser)
    if family is not None:
        return get_parser(family.parser)
    from openreward_rl.families import parser_for_model

    try:
        return get_parser(parser_for_model(model or tokenizer))
    except ValueError:
        return get_parser(parser_for_model(tokenizer))


def choose_family(config: TrainConfig, model: str | None, tokenizer: Any) -> ModelFamily | None:
    """The configured `model_family`, else the family of the model name, else of the tokenizer (its name,
    then its chat template). None for "generic" and for models of no known family (the template-derived
    bridge then serves them); `UnsupportedModelError` for a family that is refused."""
    from openreward_rl.config import GENERIC_FAMILY
    from openreward_rl.families import find_family, get_family

    if config.model_family:
        return None if config.model_family == GENERIC_FAMILY else get_family(config.model_family)
    return (find_family(model) if model else None) or find_family(tokenizer)


def episode_stack(config: TrainConfig, tokenizer: Any, model: str | None = None) -> tuple[ChatRenderer, ToolParser]:
    """The chat renderer and tool parser `config` gives a model: the one place training and eval build them.

    The renderer belongs to the model's family (`choose_family`: its stop tokens, reasoning markers and
    bridge) and gets the config's `thinking` setting as `enable_thinking`, then `chat_template_kwargs`
    (which win). The parser is the configured one, else the family's, else the one the model name or
    chat template implies. With a family and `check_model` (the default), the family is proven
    token-exact on this tokenizer first (`families.probe.check_model`, cached per tokenizer and
    template): `ModelCheckError` (a ModelFamilyError) names the first differing token otherwise.

    >>> from openreward_rl.assets import load_tokenizer
    >>> from openreward_rl.config import parse_config
    >>> renderer, parser = episode_stack(parse_config({"environments": {"e": {}}}), load_tokenizer("offline:qwen3"), "Qwen/Qwen3-8B")
    >>> renderer.template_kwargs, renderer.family.name, parser.name
    ({'enable_thinking': False}, 'qwen3', 'hermes')
    """
    family = choose_family(config, model, tokenizer)
    template_kwargs = {"enable_thinking": config.thinking, **config.chat_template_kwargs}
    renderer = (
        ChatRenderer(tokenizer, template_kwargs) if family is None else family.renderer(tokenizer, template_kwargs)
    )
    if family is not None and config.check_model:
        from openreward_rl.families.probe import check_model

        check_model(tokenizer, family, template_kwargs)
    if renderer.vision is not None:
        renderer.image_token_id  # noqa: B018 - a VisionError now when this tokenizer lacks the family's image pad as one token
    parser = choose_parser(config, model, tokenizer, family)
    check_tools_shown(config, renderer, parser, model)
    return renderer, parser


def check_engine_reads_images(engine: Any, renderer: ChatRenderer) -> None:
    """ConfigError when the model's family reads images and the engine (an engine, or its class) cannot
    send them (it says so with `reads_images = False` and `images_refused`, the reason): the model would
    see image placeholders with no pixels behind them."""
    if renderer.reads_images and getattr(engine, "reads_images", True) is False:
        family = renderer.family.name if renderer.family is not None else "model"
        reason = getattr(engine, "images_refused", "it sends no images")
        name = engine.__name__ if isinstance(engine, type) else type(engine).__name__
        raise ConfigError(
            f"the {family} family is a vision-language model, and the {name} engine cannot give it the "
            f"environment's images: {reason}; serve the model with SGLang (engine sglang), or set model_family to a text family"
        )


def check_tools_shown(
    config: TrainConfig, renderer: ChatRenderer, parser: ToolParser, model: str | None = None
) -> None:
    """ConfigError when the first prompt would show the model none of the environment's tools by default:
    the chat template drops `tools`, the system prompt has no `{tools}`, and the family declares no tool
    preamble. A parser whose reply is the call (`tool_preamble = None`) needs no tools shown, and
    `tool_preamble: false` is the config saying its replies need none (a plain answer to a `@terminal` tool).
    Where the family's preamble teaches calls `parser` does not read, the first prompt gets no preamble
    (`families.tool_preamble.parser_preamble`) and a warning says so, once."""
    if renderer.renders_tools or has_tools_placeholder(config.system_prompt_template) or not config.tool_preamble:
        return
    if needs_no_preamble(parser) or parser_preamble(parser, renderer.family) is not None:
        return
    family = renderer.family
    if family is not None and family.tool_preamble is not None:
        if _WARNED_UNTAUGHT.first((family.name, parser.name)):
            logger.warning(
                "the %s family's tool preamble teaches %s calls, which the parser %s does not read: the first prompt shows "
                "no tools; give the parser a `tool_preamble` (None where the reply is the call: docs/parsers.md) or put "
                "{tools} in system_prompt_template",
                family.name,
                family.parser,
                parser.name,
            )
        return
    name = model or getattr(renderer.tokenizer, "name_or_path", "") or "this model"
    raise ConfigError(
        f"{config.source}: the first prompt would show the model none of the environment's tools: the chat template of "
        f"{name} drops `tools` and the {family.name if family else 'generic'} family declares no tool preamble; put "
        "{tools} in system_prompt_template, or set model_family to a family with a tool preamble (chatml: the Hermes "
        "format), or set tool_preamble: false where the replies need no tools shown (a plain answer to a @terminal tool) "
        "(docs/families.md)"
    )


def context_policies(config: TrainConfig) -> dict[str, ContextPolicy | None]:
    """Each configured environment's `ContextPolicy` (None: none); ConfigError names a bad one.

    >>> from openreward_rl.config import parse_config
    >>> context_policies(parse_config({"environments": {"e": {"context_policy": {"name": "summarize", "threshold": 2}}}}))
    Traceback (most recent call last):
    ...
    openreward_rl.errors.ConfigError: <config>: environments.e.context_policy: context policy 'summarize': threshold must be in (0, 1], got 2
    """
    policies = {}
    for name, env_config in config.environments.items():
        try:
            policies[name] = context_policy(env_config.context_policy, env_config.context_policy_options)
        except ValueError as error:
            raise ConfigError(f"{config.source}: environments.{name}.context_policy: {error}") from None
    return policies


@attrs.define
class Rollouts:
    """Runs episodes of the configured environments. One per process; cheap per episode.

    `max_context_len` is the episode token budget (Slime: `--rollout-max-context-len`). `episode`
    builds each run's Episode (`ToolEpisode` unless told otherwise).
    """

    config: TrainConfig
    engine: Engine
    renderer: ChatRenderer
    parser: ToolParser
    client: Any
    max_context_len: int | None = None
    max_new_tokens: int = 4096
    episode: EpisodeBuilder = ToolEpisode
    policies: dict[str, ContextPolicy | None] | None = None  # built from the config on first use

    def __attrs_post_init__(self) -> None:
        check_engine_reads_images(self.engine, self.renderer)

    @classmethod
    def from_config(
        cls,
        config: TrainConfig,
        *,
        engine: Engine,
        tokenizer: Any,
        client: Any,
        model: str | None = None,
        max_context_len: int | None = None,
        max_new_tokens: int = 4096,
        episode: EpisodeBuilder | None = None,
    ) -> Rollouts:
        """The runner the training hooks and `openreward-rl eval` both use: one config, one prompt.
        `episode` (None: the one the config's `episode` names, `ToolEpisode` by default) builds each run's Episode."""
        renderer, parser = episode_stack(config, tokenizer, model)
        if episode is None:
            try:
                episode = episode_builder(config.episode)
            except ValueError as error:
                raise ConfigError(f"{config.source}: episode: {error}") from None
        return cls(
            config,
            engine,
            renderer,
            parser,
            client,
            max_context_len=max_context_len,
            max_new_tokens=max_new_tokens,
            episode=episode,
            policies=context_policies(config),
        )

    async def aclose(self) -> None:
        """Close what the episode builder holds open across episodes (an agent builder's endpoints); the engine
        and the SDK client are their owner's."""
        await close_episode_builder(self.episode)

    def settings_for(self, environment: str, sampling_params: Mapping[str, Any] | None = None) -> EpisodeSettings:
        env_config = self.config.environment(environment)
        if self.policies is None:
            self.policies = context_policies(self.config)
        return EpisodeSettings(
            max_turns=env_config.max_turns,
            max_context_len=self.max_context_len,
            max_new_tokens=self.max_new_tokens,
            sampling_params=dict(sampling_params or {}),
            system_prompt=self.config.system_prompt_template,
            tool_preamble=self.config.tool_preamble,
            tool_call_example=self.config.tool_call_example,
            tool_execution=self.config.tool_execution,
            on_no_tool_call=self.config.on_no_tool_call,
            nudge_message=self.config.nudge_message or DEFAULT_NUDGE,
            train_thinking=self.config.train_thinking,
            max_tool_output_tokens=self.config.max_tool_output_tokens,
            episode_timeout=self.config.episode_timeout,
            context_policy=self.policies.get(environment),
            max_compactions=env_config.max_compactions,
        )

    async def run(
        self,
        task: TaskRef,
        *,
        sampling_params: Mapping[str, Any] | None = None,
        routing_key: str | None = None,
        engine: Engine | None = None,
    ) -> Trajectory:
        """One episode of `task`, with the config's retries, timeouts and secrets; `engine` replaces the
        runner's for this episode (a `ParkingEngine` wrapping it, under partial rollout)."""
        task = resolve_task(self.config, task)
        settings = self.settings_for(task.environment, sampling_params)
        episode_engine = engine or self.engine
        if engine is not None:
            check_engine_reads_images(engine, self.renderer)
        return await run_episode(
            lambda: self.episode(episode_engine, self.renderer, self.parser, settings, routing_key=routing_key),
            self.client,
            task,
            secrets=self.config.session_secrets(task.environment),
            attempts=self.config.attempts,
            tool_timeout=self.config.tool_timeouts(task.environment),
            toolset=self.config.environment(task.environment).toolset,
            reward_policy=self.config.environment(task.environment).reward_policy(),
        )  # the episode timeout is the episode's own (settings), so a timed-out run keeps what it produced
