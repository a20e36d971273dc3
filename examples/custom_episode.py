"""A custom `Episode`: re-render the whole conversation with the chat template every turn.

`ToolEpisode` never re-renders sampled history. Some users want the opposite — exactly what the
chat template produces each turn, e.g. Qwen3's template dropping earlier turns' `<think>` blocks to
save context. This loop does that with the same building blocks (EnvSession, ChatRenderer,
ToolParser, Engine, TokenLedger, Trajectory). Qwen3's template strips `<think>` from turns before the
last user message, so after the nudge the re-rendered prompt no longer extends what the model saw.
Where the re-rendered prompt no longer extends what
the model saw before, `TokenLedger` starts a new segment and counts a prefix break; the Slime and
Miles adapters turn the segments into sibling samples of one rollout.

The episode reports its step rewards and whether the environment finished; it does not reduce them.
Handed to the config's runner (`Rollouts.from_config(..., episode=ReRenderingEpisode.build)`, the
runner `openreward-rl eval` and the training hooks use), it gets the environment's configured
`RewardPolicy` (reducer, nonterminal reward, clamp), retries, timeouts and secrets without writing
any of them, and the renderer and parser the config gives the model.

A config names the builder instead (`episode: examples/custom_episode.py:ReRenderingEpisode.build`);
eval and every training backend then build it without an argument. `examples/trl_custom_episode.py`
trains with an Episode of its own through TRL from Python.

Run it against the example environments (needs `openreward_rl.testing` and offline tokenizers):

    python examples/custom_episode.py
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import attrs

from openreward_rl import ChatRenderer, EnvSession, EpisodeSettings, StopReason, TokenLedger, Trajectory
from openreward_rl.engines import Engine, FinishReason, GenerationRequest
from openreward_rl.loop.trajectory import ToolResult, Turn
from openreward_rl.parsers import ToolParser


@attrs.define
class ReRenderingEpisode:
    engine: Engine
    renderer: ChatRenderer
    parser: ToolParser
    max_turns: int = 10
    nudge: str = "Please use the tools."
    sampling_params: dict[str, Any] = attrs.Factory(lambda: {"max_new_tokens": 512})

    @classmethod
    def build(
        cls,
        engine: Engine,
        renderer: ChatRenderer,
        parser: ToolParser,
        settings: EpisodeSettings,
        *,
        routing_key: str | None = None,
    ) -> ReRenderingEpisode:
        """An `EpisodeBuilder`: the runner's engine, renderer and parser, the environment's limits."""
        sampling = {"max_new_tokens": settings.max_new_tokens, **settings.sampling_params}
        return cls(
            engine,
            renderer,
            parser,
            max_turns=settings.max_turns,
            nudge=settings.nudge_message,
            sampling_params=sampling,
        )

    async def run(self, session: EnvSession) -> Trajectory:
        tools = await session.tools()
        messages = await session.prompt_messages()
        ledger: TokenLedger | None = None
        turns: list[Turn] = []
        rewards: list[float] = []  # every step reward, in order; the runner reduces them
        stop, finished, nudged = StopReason.MAX_TURNS, False, False
        for _ in range(self.max_turns):
            prompt = self.renderer.render_prompt(messages, tools)  # the whole history, every turn
            if ledger is None:
                ledger = TokenLedger.start(prompt)
            else:
                ledger.add_turn_prompt(prompt)  # merges, or counts a prefix break and starts a segment
            started = time.perf_counter()
            generation = await self.engine.generate(
                GenerationRequest(input_ids=prompt, sampling_params=self.sampling_params)
            )
            ledger.append_sampled(generation.output_ids, generation.logprobs)
            ids = generation.output_ids[:-1] if generation.finish_reason is FinishReason.STOP else generation.output_ids
            parsed = self.parser.parse(
                self.renderer.decode(ids), tools=tools, finish_reason=generation.finish_reason.value
            )
            assistant: dict[str, Any] = {"role": "assistant", "content": parsed.content}
            if parsed.reasoning:
                assistant["reasoning_content"] = parsed.reasoning
            if parsed.tool_calls:
                assistant["tool_calls"] = [c.to_openai() for c in parsed.tool_calls]
            messages.append(assistant)
            position = len(messages) - 1  # the message this turn produced (show and upload read it)
            results = []
            for call in parsed.tool_calls:
                outcome = await session.call_tool(call.name, call.arguments)
                results.append(
                    ToolResult(
                        call=call,
                        text=outcome.text,
                        reward=outcome.reward,
                        finished=outcome.finished,
                        error=outcome.error,
                    )
                )
                messages.append({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": outcome.text})
            rewards += [r.reward for r in results if r.reward is not None]
            turns.append(
                Turn(
                    prompt_length=len(prompt),
                    sampled_ids=generation.output_ids,
                    logprobs=generation.logprobs,
                    finish_reason=generation.finish_reason,
                    parsed=parsed,
                    tool_results=tuple(results),
                    rewards=tuple(r.reward for r in results if r.reward is not None),
                    model_seconds=time.perf_counter() - started,
                    message_index=position,
                )
            )
            if generation.finish_reason is not FinishReason.STOP:
                stop = StopReason.TRUNCATED if generation.finish_reason is FinishReason.LENGTH else StopReason.ABORTED
                break
            if any(r.finished for r in results):
                stop, finished = StopReason.COMPLETED, True
                break
            if not parsed.tool_calls:
                if nudged:
                    stop = StopReason.NO_TOOL_CALL
                    break
                nudged = True  # one nudge; the template now strips earlier <think> blocks from history
                messages.append({"role": "user", "content": self.nudge})
        assert ledger is not None
        return Trajectory(
            task=session.task,
            segments=ledger.segments,
            turns=turns,
            messages=messages,
            step_rewards=rewards,
            reward=None,  # the runner sets it with the configured reward policy
            stop_reason=stop,
            finished=finished,
            prefix_breaks=ledger.prefix_breaks,
        )


async def main() -> None:
    from openreward import AsyncOpenReward

    from openreward_rl import Rollouts, TaskRef
    from openreward_rl.assets import load_tokenizer
    from openreward_rl.config import parse_config
    from openreward_rl.engines.sglang import SGLangEngine
    from openreward_rl.env.local_server import serve_environments
    from openreward_rl.testing import ScriptedCompletion, SGLangTestServer

    tokenizer = load_tokenizer("offline:qwen3")
    think = "<think>\nFirst, who is here?\n</think>\n\n"
    script = [
        ScriptedCompletion(text=think + '<tool_call>\n{"name": "list_suspects", "arguments": {}}\n</tool_call>'),
        ScriptedCompletion(text="Hmm."),
        ScriptedCompletion(text="I cannot tell."),
    ]
    with serve_environments(["examples/environments/whodunit.py:WhoDunIt"]) as env_server:
        # the environment's reward policy is configuration, as in training: the Episode never sees it
        config = parse_config(
            {
                "thinking": True,
                "environments": {
                    "WhoDunIt": {"base_url": env_server.base_url, "reward_reduction": "sum", "nonterminal_reward": -1.0}
                },
            }
        )
        async with SGLangTestServer(tokenizer, script=script) as sglang:
            engine = SGLangEngine(sglang.url)
            client = AsyncOpenReward(api_key="local")
            rollouts = Rollouts.from_config(
                config,
                engine=engine,
                tokenizer=tokenizer,
                client=client,
                model="Qwen/Qwen3-8B",
                episode=ReRenderingEpisode.build,
            )
            trajectory = await rollouts.run(TaskRef("WhoDunIt", "train", index=0))
            await client.environments.aclose()
            await engine.aclose()
    print(
        json.dumps(
            {
                "stop_reason": trajectory.stop_reason.value,
                "turns": len(trajectory.turns),
                "prefix_breaks": trajectory.prefix_breaks,
                "segments": len(trajectory.segments),
                "reward": trajectory.reward,
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
