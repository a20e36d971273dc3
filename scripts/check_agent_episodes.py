"""Check, request by request, that an agent program's recorded episodes are token-exact.

For every model call of every episode in the given results files (`openreward-rl train/eval --eval-output`,
episodes an `agent_episode_builder` ran): the context ids the call was sampled from are the model's chat
template's rendering of the conversation the program sent at that point (its own messages and tool results,
the tool preamble after its system prompt where the template drops the tools, each earlier answer as the
text the model sampled), with

- the decoded context equal to the template's text, character for character;
- every id the model did not sample equal to the tokenizer's own encoding of its text;
- every id the model sampled kept verbatim where it was sampled, trained (loss mask 1), and nothing else trained.

This is `check-model`'s proof (which the run made once, on the family) applied to each recorded request: what
it checks is everything around the sampled answers (the prompt, each bridge the template writes after an answer:
the turn's closing, the tool results, the next turn's opening). It reads templates that write an assistant
turn's content as it is (ChatML, SmolLM2's and the Hermes-preamble families'). The environment is served to read
its tools as the program got them.

    python scripts/check_agent_episodes.py runs/own_agent/eval.before.jsonl runs/own_agent/eval.jsonl \\
        --config examples/own_agent/train_config.yaml --model runs/own_agent_warm \\
        --serve examples/environments/paint_order.py:PaintOrder

Exit 0 when every request checks; 1 with the first difference of each failing one otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from typing import Any

from openreward import AsyncOpenReward

from openreward_rl.assets import load_tokenizer
from openreward_rl.config import load_config
from openreward_rl.env.environment import open_session
from openreward_rl.env.local_server import serve_environments
from openreward_rl.loop.rollout import episode_stack
from openreward_rl.loop.trajectory import Trajectory
from openreward_rl.observe.dumps import read_trajectories
from openreward_rl.task import TaskRef


def as_template_reads(message: dict[str, Any]) -> dict[str, Any]:
    """A message as the program sent it, as the template reads it: call arguments as objects, no content as ''."""
    if message.get("role") == "assistant" and message.get("content") is None:
        message = {**message, "content": ""}
    calls = [
        {**c, "function": {**c["function"], "arguments": json.loads(c["function"]["arguments"])}}
        if isinstance(c["function"].get("arguments"), str)
        else c
        for c in message.get("tool_calls") or ()
    ]
    return {**message, "tool_calls": calls} if calls else message


def first_difference(got: str, wanted: str) -> str:
    at = next((i for i, (a, b) in enumerate(zip(got, wanted)) if a != b), min(len(got), len(wanted)))
    return f"at character {at}: recorded {got[at : at + 40]!r}, the template writes {wanted[at : at + 40]!r}"


def with_preamble(messages: list[dict[str, Any]], preamble: str | None) -> list[dict[str, Any]]:
    """The tool preamble after the program's system prompt (docs/own_agent.md), or as one before its messages."""
    if not preamble:
        return messages
    first = messages[0]
    if first["role"] in ("system", "developer") and isinstance(first.get("content"), str) and first["content"]:
        return [{**first, "content": f"{first['content']}\n\n{preamble}"}, *messages[1:]]
    return [{"role": "system", "content": preamble}, *messages]


def check_episode(episode: Trajectory, renderer: Any, tools: list[dict[str, Any]], preamble: str | None) -> list[str]:
    """The problems of one episode's requests (empty: every request is the template's, token for token)."""
    if not episode.token_exact or episode.prefix_breaks:
        return [f"the recorder marked it token_exact={episode.token_exact}, prefix_breaks={episode.prefix_breaks}"]
    if len(episode.segments) != 1:
        return [f"{len(episode.segments)} segments (the program rewrote its history): this checker reads one"]
    [segment] = episode.segments
    context = segment.context()
    sampled_spans: list[tuple[int, int]] = []
    problems = []
    conversation = [as_template_reads(m) for m in episode.messages]
    for turn in episode.turns:  # each answer as the model wrote it: its sampled text (the template adds the closer)
        ids = list(turn.sampled_ids)
        if ids and ids[-1] in renderer.end_of_turn_ids:
            ids = ids[:-1]
        conversation[turn.message_index] = {"role": "assistant", "content": renderer.decode(ids)}
    for number, turn in enumerate(episode.turns):
        sent = with_preamble(conversation[: turn.message_index], preamble)
        wanted = renderer.render_text(sent, tools, add_generation_prompt=True)
        request = context[: turn.prompt_length]
        got = renderer.decode(request)
        if got != wanted:
            problems.append(f"request {number}: {first_difference(got, wanted)}")
        position = 0
        for start, end in [*sampled_spans, (turn.prompt_length, turn.prompt_length)]:
            piece = request[position:start]
            if piece != renderer.encode(renderer.decode(piece)):
                problems.append(f"request {number}: the ids at {position}:{start} are not the tokenizer's encoding")
            position = end
        end = turn.prompt_length + len(turn.sampled_ids)
        if list(context[turn.prompt_length : end]) != list(turn.sampled_ids):
            problems.append(f"request {number}: the sampled ids are not where they were sampled")
        sampled_spans.append((turn.prompt_length, end))
    prompt = len(segment.prompt_ids)
    trained = {i for start, end in sampled_spans for i in range(start - prompt, end - prompt)}
    if [i for i, m in enumerate(segment.loss_mask) if m] != sorted(trained):
        problems.append("the loss mask is not exactly the sampled ids")
    return problems


async def tools_of(task: TaskRef) -> list[dict[str, Any]]:
    client = AsyncOpenReward(api_key="local")
    try:
        async with open_session(client, task) as session:
            return await session.tools()
    finally:
        await client.environments.aclose()


def main(argv: Sequence[str] | None = None) -> int:
    parser_ = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser_.add_argument("results", nargs="+", help="results files of agent episodes (JSONL)")
    parser_.add_argument("--config", required=True, help="the run's train_config.yaml")
    parser_.add_argument("--model", required=True, help="the run's model (its tokenizer and chat template)")
    parser_.add_argument("--serve", action="append", default=[], metavar="FILE.py:Class", help="serve this environment")
    args = parser_.parse_args(argv)
    config = load_config(args.config)
    tokenizer = load_tokenizer(args.model)
    renderer, parser = episode_stack(config, tokenizer, args.model)  # check-model's proof of the family, once
    episodes = [episode for path in args.results for episode in read_trajectories(path)]
    tools: dict[str, list[dict[str, Any]]] = {}
    with serve_environments(args.serve) as server:
        for episode in episodes:
            name = episode.task.environment
            if name not in tools:
                task = TaskRef(
                    name,
                    episode.task.split,
                    index=episode.task.index,
                    task_spec=episode.task.task_spec,
                    base_url=server.base_url,
                    variant=server.variant_for(name),
                )
                tools[name] = asyncio.run(tools_of(task))
    failed = 0
    requests = 0
    for number, episode in enumerate(episodes):
        if not episode.turns:
            continue
        requests += len(episode.turns)
        environment_tools = tools[episode.task.environment]
        preamble = (
            renderer.tool_preamble(environment_tools, parser=parser, example=config.tool_call_example)
            if config.tool_preamble
            else None
        )
        problems = check_episode(episode, renderer, environment_tools, preamble)
        if problems:
            failed += 1
            print(f"episode {number} ({episode.task.label}): " + "; ".join(problems))
    print(
        f"{len(episodes)} episodes, {requests} requests: "
        + ("every request token-exact" if not failed else f"{failed} episodes with a request that is not")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
