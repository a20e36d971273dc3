"""`ContextPolicy`: what the loop does when an episode's context grows toward `max_context_len`.

A policy looks at the conversation the model currently sees (a `ContextView`) after each environment
reply and answers with one of:

- `None`: keep appending (today's behaviour; the episode stops with `context_overflow` when the
  budget runs out);
- `Rewrite(messages)`: the next context is `messages`, rendered afresh by the chat template;
- `Summarize(request)`: first the model writes a summary in a *summary turn* (the request is a user
  message appended to the current context; the summary is sampled and trained like any turn), then
  `after_summary` gives the messages of the next context.

Every boundary starts a new token segment (`TokenLedger.compact`): its prompt is the template's
rendering of the new messages and its response the tokens sampled after it, verbatim, so each
segment is token-exact on its own and becomes its own trained sample carrying the episode's reward.
The loop caps compactions where `EpisodeSettings.max_compactions` is set; uncapped (the default), it
stops an episode whose boundaries no longer free room (`tool_episode.STALL_FRACTION`). A boundary that
would save no tokens is not taken. When a summary turn does not fit in what is left of the budget, the policy's
`fallback` is asked for a rewrite instead (None: no compaction).

Built-ins, chosen per environment in the config (`context_policy`): `clear_then_summarize` (the
config's default: OpenReward's harness order, see `ClearThenSummarize`), `none`, `clear_tool_outputs`
and `summarize`. A policy of your own is any object with these three methods; register it with
`register_context_policy` or name it in the config as `module:factory` (see
examples/custom_context_policy.py).

>>> policy = ClearToolOutputs(threshold=0.5, keep_last=1)
>>> view = ContextView(
...     messages=({"role": "user", "content": "task"}, {"role": "assistant", "content": "a"}, {"role": "tool", "content": "old"},
...               {"role": "assistant", "content": "b"}, {"role": "tool", "content": "new"}),
...     prompt_messages=1, context_length=90, incoming=20, max_context_len=100, compactions=0)
>>> [m["content"] for m in policy.plan(view).messages]
['task', 'a', '[Tool output cleared]', 'b', 'new']
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from openreward_rl._registry import Registry
from openreward_rl.errors import ConfigError

__all__ = [
    "CLEARED_MARKER",
    "ClearThenSummarize",
    "ClearToolOutputs",
    "ContextPolicy",
    "ContextView",
    "Rewrite",
    "Summarize",
    "SummarizeContext",
    "available_context_policies",
    "context_policy",
    "register_context_policy",
]

CLEARED_MARKER = "[Tool output cleared]"
DEFAULT_SUMMARY_REQUEST = (
    "Your context is nearly full. Write a summary of your progress so far: the task, what you have "
    "learned, what you have done, and what remains to do. Write only the summary; do not call tools. "
    "It will replace the earlier conversation."
)
SUMMARY_PREFIX = "Summary of your earlier work on this task (the earlier conversation was removed to free context):\n\n"


@attrs.frozen
class ContextView:
    """What a policy sees after an environment reply.

    - `messages`: the conversation the model currently sees, the environment's reply included;
    - `prompt_messages`: how many leading messages are the system prompt and the task's prompt;
    - `context_length`: tokens in the current context before the reply;
    - `incoming`: tokens the reply would append (its bridge, ending in the next generation prompt);
    - `compactions`: boundaries taken so far in this episode;
    - `measure`: the tokens a conversation would take as a new context (the loop renders it with the chat
      template); None where no renderer is at hand (`tokens_of` then estimates by characters).
    """

    messages: tuple[Mapping[str, Any], ...]
    prompt_messages: int
    context_length: int
    incoming: int
    max_context_len: int | None
    compactions: int
    measure: Callable[[Sequence[Mapping[str, Any]]], int] | None = attrs.field(default=None, eq=False, repr=False)

    def tokens_of(self, messages: Sequence[Mapping[str, Any]]) -> int:
        """Tokens `messages` would take as a new context: `measure`'s count, else the current context's
        tokens scaled by the share of its characters that `messages` keeps.

        >>> view = ContextView(messages=({"role": "user", "content": "x" * 90},), prompt_messages=1, context_length=80, incoming=20,
        ...                    max_context_len=100, compactions=0)
        >>> view.tokens_of([{"role": "user", "content": "x" * 45}])
        50
        """
        if self.measure is not None:
            return int(self.measure(messages))
        before = sum(len(str(m.get("content") or "")) for m in self.messages) or 1
        after = sum(len(str(m.get("content") or "")) for m in messages)
        return round((self.context_length + self.incoming) * after / before)

    @property
    def fraction(self) -> float:
        """The share of the budget the context would fill with the reply appended (0 without a budget)."""
        if not self.max_context_len:
            return 0.0
        return (self.context_length + self.incoming) / self.max_context_len


@attrs.frozen
class Rewrite:
    """The next context's conversation; `kind` names the boundary in the trajectory's record."""

    messages: tuple[Mapping[str, Any], ...]
    kind: str = "rewrite"


@attrs.frozen
class Summarize:
    """Ask the model for a summary first: `request` is the user message, `max_tokens` caps the summary turn."""

    request: str = DEFAULT_SUMMARY_REQUEST
    max_tokens: int = 1024


@runtime_checkable
class ContextPolicy(Protocol):
    """Decides the context boundaries of an episode; see the module docstring."""

    @property
    def name(self) -> str: ...

    def plan(self, view: ContextView) -> Rewrite | Summarize | None: ...

    def after_summary(self, view: ContextView, summary: str) -> Rewrite: ...

    def fallback(self, view: ContextView) -> Rewrite | None: ...


def _check_threshold(_: Any, attribute: attrs.Attribute, value: float) -> None:
    if not 0 < value <= 1:
        raise ConfigError(f"{attribute.name} must be in (0, 1], got {value!r}")


def _non_negative(_: Any, attribute: attrs.Attribute, value: int) -> None:
    if value < 0:
        raise ConfigError(f"{attribute.name} must be non-negative, got {value!r}")


def recent_turns(messages: Sequence[Mapping[str, Any]], start: int, keep: int) -> list[Mapping[str, Any]]:
    """The last `keep` turns after `messages[:start]`: each an assistant message and the replies after it.

    >>> msgs = [{"role": "user"}, {"role": "assistant", "content": "1"}, {"role": "tool"}, {"role": "assistant", "content": "2"}, {"role": "tool"}]
    >>> [m.get("content") for m in recent_turns(msgs, 1, 1)]
    ['2', None]
    """
    if keep <= 0:
        return []
    starts = [i for i in range(start, len(messages)) if messages[i].get("role") == "assistant"]
    if not starts:
        return []
    return list(messages[starts[max(0, len(starts) - keep)] :])


@attrs.frozen
class ClearToolOutputs:
    """At `threshold` of the budget, tool outputs older than the last `keep_last` become `marker`."""

    threshold: float = attrs.field(default=0.75, validator=_check_threshold)
    keep_last: int = attrs.field(default=2, validator=_non_negative)
    marker: str = CLEARED_MARKER
    name: str = "clear_tool_outputs"

    def plan(self, view: ContextView) -> Rewrite | None:
        if view.fraction < self.threshold:
            return None
        return self.fallback(view)

    def after_summary(self, view: ContextView, summary: str) -> Rewrite:
        raise NotImplementedError("clear_tool_outputs asks for no summary")

    def fallback(self, view: ContextView) -> Rewrite | None:
        """The rewrite, whatever the fill; None when no tool output is left to clear."""
        tools = [i for i, m in enumerate(view.messages) if m.get("role") == "tool" and i >= view.prompt_messages]
        old = [
            i for i in tools[: max(0, len(tools) - self.keep_last)] if view.messages[i].get("content") != self.marker
        ]
        if not old:
            return None
        cleared = set(old)
        return Rewrite(
            tuple({**m, "content": self.marker} if i in cleared else m for i, m in enumerate(view.messages)),
            kind=self.name,
        )


@attrs.frozen
class SummarizeContext:
    """At `threshold` of the budget the model summarises its work in a summary turn (trained); the next
    context is the system prompt, the task's prompt, the summary and the last `keep_recent_turns` turns.
    When the summary turn does not fit, `fallback` (clear_tool_outputs by default) rewrites instead."""

    threshold: float = attrs.field(default=0.75, validator=_check_threshold)
    keep_recent_turns: int = attrs.field(default=1, validator=_non_negative)
    summary_tokens: int = attrs.field(default=1024)
    request: str = DEFAULT_SUMMARY_REQUEST
    summary_prefix: str = SUMMARY_PREFIX
    fallback_policy: ClearToolOutputs | None = attrs.field(factory=lambda: ClearToolOutputs(threshold=1.0))
    name: str = "summarize"

    def __attrs_post_init__(self) -> None:
        if self.summary_tokens < 1:
            raise ConfigError(f"summary_tokens must be at least 1, got {self.summary_tokens}")

    def plan(self, view: ContextView) -> Summarize | None:
        if view.fraction < self.threshold:
            return None
        return Summarize(self.request, self.summary_tokens)

    def after_summary(self, view: ContextView, summary: str) -> Rewrite:
        """`view.messages` ends with the summary request and the model's summary; both are dropped."""
        head = list(view.messages[: view.prompt_messages])
        body = list(view.messages[view.prompt_messages : -2])
        recent = recent_turns(body, 0, self.keep_recent_turns)
        note = {"role": "user", "content": self.summary_prefix + summary.strip()}
        return Rewrite(tuple([*head, note, *recent]), kind=self.name)

    def fallback(self, view: ContextView) -> Rewrite | None:
        return self.fallback_policy.fallback(view) if self.fallback_policy is not None else None


def _check_summary_tokens(_: Any, attribute: attrs.Attribute, value: int) -> None:
    if value < 1:
        raise ConfigError(f"{attribute.name} must be at least 1, got {value}")


@attrs.frozen
class ClearThenSummarize:
    """OpenReward's harness order, the config's default: at `threshold` (0.8) of the budget, tool outputs
    older than the last `keep_last` become `marker`; when that alone would leave the context above
    `clear_target` (0.5) of the budget, the model summarises instead (a summary turn capped at
    `summary_tokens`, 1024), and the next context is the system prompt, the task's prompt, the summary
    and the last `keep_recent_turns` turns. A summary turn that does not fit falls back to clearing.

    >>> turn = lambda n, size: ({"role": "assistant", "content": f"a{n}"}, {"role": "tool", "content": "x" * size})
    >>> view = ContextView(messages=({"role": "user", "content": "task"}, *turn(1, 500), *turn(2, 50), *turn(3, 50)), prompt_messages=1,
    ...                    context_length=700, incoming=150, max_context_len=1000, compactions=0)
    >>> [m["content"][:5] for m in ClearThenSummarize().plan(view).messages]  # clearing leaves ~18% of the budget
    ['task', 'a1', '[Tool', 'a2', 'xxxxx', 'a3', 'xxxxx']
    >>> type(ClearThenSummarize(clear_target=0.1).plan(view)).__name__  # not enough: summarise
    'Summarize'
    """

    threshold: float = attrs.field(default=0.8, validator=_check_threshold)
    clear_target: float = attrs.field(default=0.5, validator=_check_threshold)
    keep_last: int = attrs.field(default=2, validator=_non_negative)
    keep_recent_turns: int = attrs.field(default=1, validator=_non_negative)
    summary_tokens: int = attrs.field(default=1024, validator=_check_summary_tokens)
    request: str = DEFAULT_SUMMARY_REQUEST
    summary_prefix: str = SUMMARY_PREFIX
    marker: str = CLEARED_MARKER
    name: str = "clear_then_summarize"

    def plan(self, view: ContextView) -> Rewrite | Summarize | None:
        if view.fraction < self.threshold:
            return None
        cleared = self.fallback(view)
        if (
            cleared is not None
            and view.max_context_len
            and view.tokens_of(cleared.messages) <= self.clear_target * view.max_context_len
        ):
            return cleared
        return Summarize(self.request, self.summary_tokens)

    def after_summary(self, view: ContextView, summary: str) -> Rewrite:
        head = SummarizeContext(
            keep_recent_turns=self.keep_recent_turns, summary_prefix=self.summary_prefix, name=self.name
        )
        return head.after_summary(view, summary)

    def fallback(self, view: ContextView) -> Rewrite | None:
        """Clearing, whatever it frees; None when no old tool output is left to clear."""
        clearing = ClearToolOutputs(
            threshold=1.0, keep_last=self.keep_last, marker=self.marker, name="clear_tool_outputs"
        )
        return clearing.fallback(view)


_REGISTRY: Registry[Callable[..., ContextPolicy | None]] = Registry(
    duplicate="a context policy named {name!r} is already registered",
    unknown="unknown context policy {name!r}; choose one of: {known}",
)
_REGISTRY.update(
    {
        "none": lambda **options: None,
        "clear_tool_outputs": ClearToolOutputs,
        "summarize": SummarizeContext,
        "clear_then_summarize": ClearThenSummarize,
    }
)


def register_context_policy(name: str, factory: Callable[..., ContextPolicy | None]) -> None:
    """Make `name` usable as `context_policy` in the config (a later registration replaces an earlier
    one); `factory(**options)` builds the policy."""
    _REGISTRY.register(name, replace=True)(factory)


def available_context_policies() -> list[str]:
    return _REGISTRY.names()


def context_policy(name: str, options: Mapping[str, Any] | None = None) -> ContextPolicy | None:
    """The policy `name` (registered, or `package.module:factory` / `path/to/file.py:factory`) built with
    `options`; None for "none".

    `ConfigError` names the problem (unknown name, bad option, not a ContextPolicy).

    >>> context_policy("summarize", {"threshold": 0.6}).threshold
    0.6
    >>> context_policy("none") is None
    True
    """
    options = dict(options or {})
    try:
        factory = _REGISTRY.resolve(name)
    except ValueError as error:  # an unknown or unimportable name is a bad config value
        raise ConfigError(str(error)) from None
    if not callable(factory):
        raise ConfigError(f"context policy {name!r} is {factory!r}, not a policy class or factory")
    try:
        policy = factory(**dict(options or {}))
    except (TypeError, ValueError) as error:
        raise ConfigError(f"context policy {name!r}: {error}") from None
    if policy is not None and not isinstance(policy, ContextPolicy):
        raise ConfigError(
            f"context policy {name!r} built {type(policy).__name__}, which lacks plan/after_summary/fallback or a name"
        )
    return policy
