"""A context policy of your own: keep only the lines of old tool outputs that matter.

`KeepKeyLines` is a `ContextPolicy` (openreward_rl.loop.context): past `threshold` of the context
budget it rewrites every tool output but the newest `keep_last` to the lines matching `pattern`
(here, the corridor's key and exit lines), so what the agent needs survives and the bulk goes. The
loop renders the rewritten conversation with the chat template and starts a new token segment there,
exactly as for the built-in policies; the new segment becomes its own trained sample.

Use it from the config, by file or, with the examples directory importable, by module:

```yaml
environments:
  Corridor:
    context_policy: {name: "examples/custom_context_policy.py:KeepKeyLines", threshold: 0.6}
    # or: {name: "custom_context_policy:KeepKeyLines", threshold: 0.6}
```

or register a name once at import time, `register_context_policy("keep_key_lines", KeepKeyLines)`, in a
module the config's `plugins:` imports. A name that does not import, or builds no policy, is refused
before any model loads (docs/training.md, "Your own parts").

Run it (`python examples/custom_context_policy.py`) to see what it does to a Corridor conversation
(examples/environments/corridor.py) three rooms in, past its threshold: each message before and after.

>>> from openreward_rl.loop.context import ContextView
>>> view = ContextView(messages=({"role": "user", "content": "go"}, {"role": "tool", "content": "dust\\nTHE EXIT KEY IS jade-1\\nmore dust"},
...                              {"role": "tool", "content": "new"}), prompt_messages=1, context_length=80, incoming=10, max_context_len=100, compactions=0)
>>> [m["content"] for m in KeepKeyLines(threshold=0.5).plan(view).messages]
['go', '[kept lines] THE EXIT KEY IS jade-1', 'new']
"""

from __future__ import annotations

import re

import attrs

from openreward_rl.loop.context import ContextView, Rewrite


@attrs.frozen
class KeepKeyLines:
    threshold: float = 0.75
    keep_last: int = 1
    pattern: str = r"KEY|last room"
    name: str = "keep_key_lines"

    def plan(self, view: ContextView) -> Rewrite | None:
        return self.fallback(view) if view.fraction >= self.threshold else None

    def after_summary(self, view: ContextView, summary: str) -> Rewrite:
        raise NotImplementedError("this policy never asks for a summary")

    def fallback(self, view: ContextView) -> Rewrite | None:
        tools = [i for i, m in enumerate(view.messages) if m.get("role") == "tool" and i >= view.prompt_messages]
        old = {
            i
            for i in tools[: max(0, len(tools) - self.keep_last)]
            if not str(view.messages[i].get("content", "")).startswith("[kept lines]")
        }
        if not old:
            return None
        matcher = re.compile(self.pattern)

        def kept(text: str) -> str:
            return "[kept lines] " + "\n".join(line for line in text.splitlines() if matcher.search(line))

        messages = tuple(
            {**m, "content": kept(str(m.get("content", "")))} if i in old else m for i, m in enumerate(view.messages)
        )
        return Rewrite(messages, kind=self.name)


def main() -> None:
    """Print what the policy makes of a Corridor conversation three rooms in, at 80% of the context budget."""
    import sys
    from pathlib import Path

    from openreward_rl.loop.context import ContextView

    sys.path.insert(0, str(Path(__file__).resolve().parent / "environments"))
    from corridor import room_text

    spec = {"id": "train-000", "length": 3, "bulk": 2}
    messages = (
        {"role": "user", "content": "Walk the corridor and leave by the exit door."},
        *({"role": "tool", "content": room_text(spec, room)} for room in range(3)),
    )
    view = ContextView(
        messages=messages, prompt_messages=1, context_length=700, incoming=100, max_context_len=1000, compactions=0
    )
    policy = KeepKeyLines(threshold=0.6)
    rewrite = policy.plan(view)
    print(
        f"{policy.name} at {view.fraction:.0%} of the budget (threshold {policy.threshold:.0%}): "
        f"{'rewrites the context' if rewrite else 'keeps the context'}"
    )
    for number, (before, after) in enumerate(zip(view.messages, rewrite.messages if rewrite else view.messages)):
        changed = "rewritten" if after["content"] != before["content"] else "kept"
        print(
            f"\n[{number}] {before['role']} ({changed}, {len(before['content'])} -> {len(after['content'])} characters)"
        )
        print(after["content"])


if __name__ == "__main__":
    main()
