"""ToolEpisode end to end: the SDK's real environment `Server` on 127.0.0.1 (WhoDunIt, MathEnv, Faulty),
the real Qwen3 / Qwen2.5 tokenizers and chat templates, and `SGLangTestServer`, a faithful double of
SGLang's `/generate` wire format (SGLang itself cannot run here) that records every request's
`input_ids` and answers scripted completions tokenized by the real tokenizer, with log-probs.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import pytest
from openreward import AsyncOpenReward

from hermes_calls import call
from openreward_rl import ChatRenderer, EpisodeSettings, StopReason, TaskRef, ToolEpisode, Trajectory, run_episode
from openreward_rl.assets import load_tokenizer
from openreward_rl.engines.sglang import SGLangEngine
from openreward_rl.env.local_server import LocalEnvServer, load_environment_class
from openreward_rl.parsers import get_parser
from openreward_rl.reducers import RewardPolicy, get_reducer
from openreward_rl.testing import ScriptedCompletion, SGLangTestServer
from scripted_training_view import expected_mask_and_logprobs

pytestmark = pytest.mark.anyio
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 512}


def culprit_of(env_server: LocalEnvServer, index: int, split: str = "train") -> str:
    cls = load_environment_class(next(s for s in env_server.specs if s.endswith(":WhoDunIt")))
    module = sys.modules[cls.__module__]
    return module.generate_case(f"whodunit/{split}/{index}").culprit_name


@attrs.define
class Harness:
    env_server: LocalEnvServer
    client: AsyncOpenReward
    tokenizer_name: str = "offline:qwen3"

    async def run(
        self,
        script: Sequence[ScriptedCompletion],
        *,
        environment: str = "WhoDunIt",
        index: int = 0,
        settings: EpisodeSettings | None = None,
        reward_policy: RewardPolicy | None = None,
        server_setup: Callable[[SGLangTestServer], None] | None = None,
        context_len: int = 32768,
        engine_attempts: int = 4,
    ) -> tuple[Trajectory, SGLangTestServer]:
        tokenizer = load_tokenizer(self.tokenizer_name)
        settings = settings or EpisodeSettings(sampling_params=SAMPLING)
        async with SGLangTestServer(tokenizer, script=list(script), context_len=context_len) as server:
            if server_setup:
                server_setup(server)
            engine = SGLangEngine(server.url, max_attempts=engine_attempts, backoff_initial_s=0.01, backoff_max_s=0.02)
            task = TaskRef(
                environment,
                "train",
                index=index,
                base_url=self.env_server.base_url,
                variant=self.env_server.variant_for(environment),
            )
            try:
                trajectory = await run_episode(
                    lambda: ToolEpisode(
                        engine, ChatRenderer(tokenizer), get_parser("hermes"), settings, routing_key="session-1"
                    ),
                    self.client,
                    task,
                    reward_policy=reward_policy,
                    attempts=1,
                )
            finally:
                await engine.aclose()
        return trajectory, server


@pytest.fixture
async def harness(env_server: LocalEnvServer, openreward_client: AsyncOpenReward) -> Harness:
    return Harness(env_server, openreward_client)


def assert_token_exact(trajectory: Trajectory, server: SGLangTestServer, tokenizer: Any) -> None:
    """The properties the issue asks for, checked against what the engine actually received and sent."""
    requests = [r for r in server.requests if r.path == "/generate"]
    assert len(requests) == len(trajectory.turns)
    sampled = [list(t.sampled_ids) for t in trajectory.turns]
    for i in range(1, len(requests)):
        previous = requests[i - 1].input_ids + sampled[i - 1]
        current = requests[i].input_ids
        assert current[: len(previous)] == previous, f"turn {i} does not extend turn {i - 1} exactly"
        bridge = current[len(previous) :]
        assert bridge, "a bridge is never empty: it ends with the next generation prompt"
        assert tokenizer.decode(bridge).endswith("<|im_start|>assistant\n")
    assert trajectory.tokens == requests[-1].input_ids + sampled[-1]
    assert trajectory.prompt_ids == requests[0].input_ids
    expected_mask, expected_logprobs = expected_mask_and_logprobs(requests, sampled)
    assert trajectory.loss_mask == expected_mask
    assert trajectory.rollout_logprobs == pytest.approx(expected_logprobs)
    assert len(trajectory.response_ids) == len(trajectory.loss_mask) == len(trajectory.rollout_logprobs)
    for turn in trajectory.turns:  # S3/S16: the end-of-turn token once, never a phantom second one
        assert turn.sampled_ids.count(tokenizer.eos_token_id) <= 1
    assert trajectory.prefix_breaks == 0


@pytest.mark.parametrize("tokenizer_name", ["offline:qwen3", "offline:qwen2.5"])
async def test_five_turn_whodunit_is_token_exact(
    harness: Harness, env_server: LocalEnvServer, tokenizer_name: str
) -> None:
    harness.tokenizer_name = tokenizer_name
    culprit = culprit_of(env_server, 0)
    thinking = (
        "<think>\nThe trace near the body should match a habit.\n</think>\n\n"
        if tokenizer_name == "offline:qwen3"
        else ""
    )
    script = [
        ScriptedCompletion(text="Let me see who is here.\n" + call("list_suspects")),
        ScriptedCompletion(text=call("interview", suspect=culprit) + "\n" + call("inspect", location="library")),
        ScriptedCompletion(text=thinking + call("inspect", location="garden")),
        ScriptedCompletion(text=call("interview", suspect="Nobody Special")),
        ScriptedCompletion(text=thinking + "I am sure.\n" + call("accuse", suspect=culprit)),
    ]
    trajectory, server = await harness.run(script)
    tokenizer = load_tokenizer(tokenizer_name)
    assert trajectory.stop_reason is StopReason.COMPLETED, trajectory.stop_detail
    assert trajectory.finished and trajectory.reward == 1.0 and trajectory.step_rewards == [1.0]
    assert len(trajectory.turns) == 5
    assert [len(t.tool_results) for t in trajectory.turns] == [1, 2, 1, 1, 1]  # several calls in one turn
    assert_token_exact(trajectory, server, tokenizer)
    generates = [r for r in server.requests if r.path == "/generate"]
    assert all(r.routing_key == "session-1" for r in generates)
    assert len({r.rid for r in generates}) == 5
    assert all(r.sampling_params["temperature"] == 1.0 for r in generates)
    if thinking:  # thinking stays in context and is trained
        last = trajectory.turns[-1]
        assert tokenizer.decode(last.sampled_ids).startswith("<think>")
        assert last.parsed.reasoning == "The trace near the body should match a habit."
        assert trajectory.messages[-2]["reasoning_content"] == last.parsed.reasoning
    assert trajectory.metrics["tool_calls"] == 6.0 and trajectory.metrics["prefix_breaks"] == 0.0
    assert [t.weight_version for t in trajectory.turns] == ["default"] * 5  # the double's meta_info.weight_version
    assert Trajectory.from_dict(trajectory.to_dict()).turns == trajectory.turns


async def test_math_terminal_tool_takes_the_plain_answer(harness: Harness, env_server: LocalEnvServer) -> None:
    cls = load_environment_class(next(s for s in env_server.specs if s.endswith(":MathEnv")))
    task = cls.list_tasks("train")[2]
    script = [
        ScriptedCompletion(text=call("calculator", expression="1 + 1")),
        ScriptedCompletion(text=f"The answer is {task['answer']}"),
    ]
    trajectory, server = await harness.run(script, environment="MathEnv", index=2)
    assert trajectory.stop_reason is StopReason.COMPLETED
    assert trajectory.reward == 1.0 and trajectory.finished
    assert trajectory.turns[-1].tool_results[0].reward == 1.0
    assert_token_exact(trajectory, server, load_tokenizer("offline:qwen3"))


async def test_max_turns_applies_the_nonterminal_reward(harness: Harness) -> None:
    policy = RewardPolicy(get_reducer("sum"), nonterminal_reward=-0.5)
    settings = EpisodeSettings(max_turns=2, sampling_params=SAMPLING)
    trajectory, server = await harness.run(
        [ScriptedCompletion(text=call("list_suspects"))] * 2, settings=settings, reward_policy=policy
    )
    assert trajectory.stop_reason is StopReason.MAX_TURNS
    assert not trajectory.finished and trajectory.step_rewards == [] and trajectory.reward == -0.5
    assert_token_exact(trajectory, server, load_tokenizer("offline:qwen3"))


async def test_no_tool_call_ends_or_nudges(harness: Harness, env_server: LocalEnvServer) -> None:
    ended, _ = await harness.run(
        [ScriptedCompletion(text="I give up.")],
        settings=EpisodeSettings(on_no_tool_call="end", sampling_params=SAMPLING),
    )
    assert ended.stop_reason is StopReason.NO_TOOL_CALL and ended.reward is None  # no reward observed, not 0

    culprit = culprit_of(env_server, 0)
    settings = EpisodeSettings(on_no_tool_call="nudge", nudge_message="Use a tool, please.", sampling_params=SAMPLING)
    nudged, server = await harness.run(
        [ScriptedCompletion(text="Hmm."), ScriptedCompletion(text=call("accuse", suspect=culprit))], settings=settings
    )
    assert nudged.stop_reason is StopReason.COMPLETED and nudged.reward == 1.0
    second_prompt = load_tokenizer("offline:qwen3").decode(server.requests[1].input_ids)
    assert second_prompt.endswith(
        "Hmm.<|im_end|>\n<|im_start|>user\nUse a tool, please.<|im_end|>\n<|im_start|>assistant\n"
    )


async def test_length_finish_is_truncated_and_the_cut_call_never_runs(harness: Harness) -> None:
    settings = EpisodeSettings(sampling_params={**SAMPLING, "max_new_tokens": 6})
    trajectory, _ = await harness.run(
        [ScriptedCompletion(text=call("accuse", suspect="Somebody Innocent Indeed"))], settings=settings
    )
    assert trajectory.stop_reason is StopReason.TRUNCATED
    assert trajectory.turns[0].tool_results == () and trajectory.step_rewards == []
    assert len(trajectory.turns[0].sampled_ids) == 6 and sum(trajectory.loss_mask) == 6


async def test_context_budget_clamps_max_new_tokens_and_overflows(harness: Harness) -> None:
    probe, server = await harness.run(
        [ScriptedCompletion(text=call("list_suspects"))] * 2,
        settings=EpisodeSettings(max_turns=1, sampling_params=SAMPLING),
    )
    prompt_length = len(server.requests[0].input_ids)
    budget = prompt_length + 40
    settings = EpisodeSettings(max_context_len=budget, max_turns=10, sampling_params=SAMPLING)
    trajectory, server = await harness.run([ScriptedCompletion(text=call("list_suspects"))] * 10, settings=settings)
    assert trajectory.stop_reason is StopReason.CONTEXT_OVERFLOW
    first = server.requests[0].sampling_params["max_new_tokens"]
    assert first == 40  # clamped to what the budget leaves, not the per-call 512
    assert len(trajectory.tokens) <= budget


async def test_engine_abort_and_engine_failure_are_aborted_without_reward(harness: Harness) -> None:
    aborted, _ = await harness.run([ScriptedCompletion(text="partial", finish="abort")])
    assert aborted.stop_reason is StopReason.ABORTED and aborted.reward is None
    assert aborted.turns[0].sampled_ids  # the partial output is kept, not lost

    failed, _ = await harness.run(
        [ScriptedCompletion(text="x")], server_setup=lambda s: s.fail_next(10, status=500), engine_attempts=2
    )
    assert failed.stop_reason is StopReason.ABORTED and failed.reward is None
    assert "engine" in failed.stop_detail


async def test_tool_that_raises_is_an_env_error_not_a_reward(harness: Harness) -> None:
    trajectory, _ = await harness.run([ScriptedCompletion(text=call("explode", message="boom"))], environment="Faulty")
    assert trajectory.stop_reason is StopReason.ENV_ERROR
    assert trajectory.reward is None and not trajectory.trainable
    assert trajectory.prompt_ids  # what was produced before the fault is kept


async def test_model_mistakes_go_back_to_the_model(harness: Harness, env_server: LocalEnvServer) -> None:
    culprit = culprit_of(env_server, 0)
    script = [
        ScriptedCompletion(text='<tool_call>\n{"name": "interview", "arguments": {"suspect": }\n</tool_call>'),
        ScriptedCompletion(text=call("teleport", where="moon")),
        ScriptedCompletion(text=call("interview", who="nobody")),
        ScriptedCompletion(text=call("accuse", suspect=culprit)),
    ]
    trajectory, server = await harness.run(script)
    assert trajectory.stop_reason is StopReason.COMPLETED and trajectory.reward == 1.0
    tokenizer = load_tokenizer("offline:qwen3")
    second, third, fourth = (tokenizer.decode(r.input_ids) for r in server.requests[1:4])
    assert "invalid_json" in second
    assert "unknown_tool: unknown tool 'teleport'" in third
    assert trajectory.turns[2].tool_results[0].error == "input_validation"
    assert trajectory.metrics["parse_errors/invalid_json"] == 1.0 and trajectory.metrics["tool_errors"] == 1.0
    assert trajectory.metrics["tool_errors/input_validation"] == 1.0
    assert_token_exact(trajectory, server, tokenizer)


async def test_thinking_can_be_masked_out_of_the_loss(harness: Harness, env_server: LocalEnvServer) -> None:
    culprit = culprit_of(env_server, 0)
    settings = EpisodeSettings(train_thinking=False, sampling_params=SAMPLING)
    text = "<think>\nhmm\n</think>\n\n" + call("accuse", suspect=culprit)
    trajectory, _ = await harness.run([ScriptedCompletion(text=text)], settings=settings)
    tokenizer = load_tokenizer("offline:qwen3")
    sampled = list(trajectory.turns[0].sampled_ids)
    closer = sampled.index(tokenizer.convert_tokens_to_ids("</think>"))
    assert trajectory.loss_mask == [0] * (closer + 1) + [1] * (len(sampled) - closer - 1)
    assert trajectory.tokens[-len(sampled) :] == sampled  # kept in context all the same


async def test_a_turn_whose_tool_call_fails_stays_on_record(harness: Harness) -> None:
    trajectory, server = await harness.run(
        [ScriptedCompletion(text=call("explode", message="boom"))], environment="Faulty"
    )
    assert trajectory.stop_reason is StopReason.ENV_ERROR
    (turn,) = trajectory.turns
    assert turn.parsed.tool_calls[0].name == "explode" and turn.tool_results == ()
    assert trajectory.tokens == server.requests[0].input_ids + list(turn.sampled_ids)


async def test_the_configured_episode_timeout_keeps_what_was_produced(
    harness: Harness, env_server: LocalEnvServer
) -> None:
    """`episode_timeout` from train_config.yaml, through `Rollouts`: Faulty's `hang` tool outlasts it;
    the episode ends as `timeout` with its sampled turn on record, not as an empty failure."""
    from openreward_rl.config import parse_config
    from openreward_rl.loop.rollout import Rollouts

    config = parse_config(
        {
            "environments": {"Faulty": {"variant": "faulty", "base_url": env_server.base_url}},
            "parser": "hermes",
            "attempts": 1,
            "episode_timeout": 1,
            "tool_timeout": 60,
        }
    )
    tokenizer = load_tokenizer("offline:qwen3")
    async with SGLangTestServer(tokenizer, script=[ScriptedCompletion(text=call("hang", seconds=30))]) as server:
        engine = SGLangEngine(server.url)
        try:
            rollouts = Rollouts(
                config, engine, ChatRenderer(tokenizer), get_parser("hermes"), harness.client, max_new_tokens=64
            )
            trajectory = await rollouts.run(TaskRef("Faulty", "train", index=0))
        finally:
            await engine.aclose()
    assert trajectory.stop_reason is StopReason.TIMEOUT and trajectory.reward is None
    (turn,) = trajectory.turns
    assert turn.parsed.tool_calls[0].name == "hang"
    assert trajectory.tokens == server.requests[0].input_ids + list(turn.sampled_ids)
