"""TRL training from Python with an Episode of your own: `TrlSession.open(..., episode=MyEpisode.build)`.

`AnswerEpisode` is a loop for answer-only environments, those whose `@terminal` tool grades a plain
reply: one model turn, whose reply (stripped) goes to that tool; no tool-call format and no tool list,
so even a 135M model is graded on every reply it finishes. It records the answer as a call named
`answer`. It is built from the library's blocks (EnvSession, ChatRenderer, Engine, TokenLedger,
Trajectory) and reports its step rewards without reducing them: the runner applies the config's
reward policy, retries, timeouts and secrets, and the TRL adapter turns each trajectory into one
completion, token for token (docs/training.md, "Your own parts").

    with TrlSession.open(config, options, serve=[PAINT], episode=AnswerEpisode.build) as session:
        trainer = session.trainer()
        trainer.train()

The same builder can be named in the config instead (`episode: examples/trl_custom_episode.py:AnswerEpisode.build`),
which `openreward-rl train --framework trl` and `eval` then use.

Run it: `python examples/trl_custom_episode.py` trains SmolLM2-135M (`offline:smollm2`) on the CPU for
two GRPO steps on PaintColour (examples/environments/paint.py, served on 127.0.0.1) and prints one JSON
line: the steps taken and the last step's episodes (reply, calls, reward, stop reason).
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs

from openreward_rl import ChatRenderer, EnvSession, EpisodeSettings, StopReason, TokenLedger, Trajectory
from openreward_rl.engines import Engine, FinishReason, GenerationRequest
from openreward_rl.loop.episode import format_system_prompt
from openreward_rl.loop.trajectory import ToolResult, Turn
from openreward_rl.parsers import ParsedTurn, ToolCall, ToolParser
from openreward_rl.parsers.common import new_call_id

PAINT = f"{Path(__file__).resolve().parent / 'environments' / 'paint.py'}:PaintColour"


@attrs.define
class AnswerEpisode:
    """One model turn; the reply is the answer the environment's terminal tool grades."""

    engine: Engine
    renderer: ChatRenderer
    settings: EpisodeSettings

    @classmethod
    def build(
        cls,
        engine: Engine,
        renderer: ChatRenderer,
        parser: ToolParser,
        settings: EpisodeSettings,
        *,
        routing_key: str | None = None,
    ) -> AnswerEpisode:
        """An `EpisodeBuilder`: the runner's engine and renderer, the environment's settings (no parser: the reply is the answer)."""
        return cls(engine, renderer, settings)

    async def run(self, session: EnvSession) -> Trajectory:
        if await session.terminal_tool() is None:
            raise ValueError(
                f"AnswerEpisode needs an environment with a @terminal tool; {session.task.environment} has none"
            )
        messages = await session.prompt_messages()
        system = format_system_prompt(self.settings.system_prompt, [])
        if system:
            messages.insert(0, {"role": "system", "content": system})
        prompt = self.renderer.render_prompt(messages)
        ledger = TokenLedger.start(prompt)
        started = time.perf_counter()
        sampling = {"max_new_tokens": self.settings.max_new_tokens, **self.settings.sampling_params}
        generation = await self.engine.generate(GenerationRequest(input_ids=prompt, sampling_params=sampling))
        ledger.append_sampled(generation.output_ids, generation.logprobs)
        ended = generation.finish_reason is FinishReason.STOP
        reply = self.renderer.decode(generation.output_ids[:-1] if ended else generation.output_ids).strip()
        messages.append({"role": "assistant", "content": reply})
        call = ToolCall("answer", {"reply": reply}, new_call_id())
        results: list[ToolResult] = []
        if ended:  # a reply cut at the token limit is no answer
            outcome = await session.call_terminal_tool(reply)
            results.append(
                ToolResult(
                    call=call, text=outcome.text, reward=outcome.reward, finished=outcome.finished, error=outcome.error
                )
            )
        rewards = [r.reward for r in results if r.reward is not None]
        turn = Turn(
            prompt_length=len(prompt),
            sampled_ids=generation.output_ids,
            logprobs=generation.logprobs,
            finish_reason=generation.finish_reason,
            parsed=ParsedTurn(content="", tool_calls=(call,)),
            tool_results=tuple(results),
            rewards=tuple(rewards),
            model_seconds=time.perf_counter() - started,
            message_index=len(messages) - 1,
        )
        finished = any(r.finished for r in results)
        if finished or ended:
            stop = StopReason.COMPLETED
        else:
            stop = StopReason.TRUNCATED if generation.finish_reason is FinishReason.LENGTH else StopReason.ABORTED
        return Trajectory(
            task=session.task,
            segments=ledger.segments,
            turns=[turn],
            messages=messages,
            step_rewards=rewards,
            reward=None,
            stop_reason=stop,
            finished=finished,
        )  # fmt: skip  (reward None: the runner sets it with the configured reward policy)


def train(output_dir: str, *, model: Any = None, tokenizer: Any = None, steps: int = 2) -> dict[str, Any]:
    """`steps` GRPO steps of SmolLM2 on PaintColour with `AnswerEpisode`; `model`/`tokenizer`: an already loaded SmolLM2."""
    from openreward_rl.backends.trl import TrlOptions, TrlSession, quiet_trainer
    from openreward_rl.config import parse_config

    config = parse_config(
        {
            "environments": {"PaintColour": {"splits": ["train"], "max_turns": 1}},
            "system_prompt_template": "You are a painter. Reply with the colour only, one word.",
            "parser": "hermes",  # the runner builds one; AnswerEpisode does not use it
            "attempts": 1,
            "upload": False,
        }
    )
    options = TrlOptions(
        model="offline:smollm2",
        device="cpu",
        output_dir=output_dir,
        max_steps=steps,
        prompts_per_step=2,
        n_samples=2,
        max_new_tokens=16,
        temperature=0.7,
        lr=5e-5,
        save_interval=0,
    )
    with TrlSession.open(
        config, options, serve=[PAINT], episode=AnswerEpisode.build, model=model, tokenizer=tokenizer
    ) as session:
        trainer = quiet_trainer(session.trainer())
        trainer.train()
        episodes = session.adapter.last_trajectories
    return {
        "steps": trainer.state.global_step,
        "last_step": [
            {
                "reply": e.messages[-1]["content"] if e.messages else None,
                "answered": [r.call.name for t in e.turns for r in t.tool_results],
                "reward": e.reward,
                "stop_reason": e.stop_reason.value,
                "colour": (e.task.task_spec or {}).get("colour"),
            }
            for e in episodes
        ],
    }


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        print(json.dumps(train(folder)))
