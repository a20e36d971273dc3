"""The example environments, driven by the real SDK client against the real SDK server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import re
import sys

import pytest
from openreward.api.environments import SessionTerminatedError, ToolCallError, ToolFailed
from openreward.api.environments.types import Task

from openreward_rl.env.local_server import load_environment_class

pytestmark = [
    pytest.mark.anyio,
    # the SDK leaves a retry coroutine un-awaited when a session dies (cosmetic, see the SDK reference)
    pytest.mark.filterwarnings("ignore:coroutine .resumable_sse. was never awaited:RuntimeWarning"),
]


def _text(output) -> str:
    return "".join(block.text for block in output.blocks)


# -- WhoDunIt -----------------------------------------------------------------------------------


async def test_whodunit_splits_and_task_counts(whodunit_env):
    assert await whodunit_env.list_splits() == ["train", "test"]
    assert await whodunit_env.num_tasks("train") == 50
    tasks = await whodunit_env.list_tasks("test")
    assert [t.task_spec["case_id"] for t in tasks] == [f"test-{i:03d}" for i in range(10)]


async def test_whodunit_tasks_and_prompts_are_deterministic(whodunit_env):
    first = [t.task_spec for t in await whodunit_env.list_tasks("train")]
    again = [t.task_spec for t in await whodunit_env.get_task_range("train", 0, 50)]
    assert first == again
    assert len({spec["seed"] for spec in first}) == 50

    async with whodunit_env.session(split="train", index=7) as by_index:
        prompt_by_index = await by_index.get_prompt()
    task = await whodunit_env.get_task("train", 7)
    async with whodunit_env.session(task) as by_task:
        prompt_by_task = await by_task.get_prompt()
    assert prompt_by_index == prompt_by_task
    assert "Suspects:" in prompt_by_task[0].text


def test_whodunit_cases_vary_and_each_has_exactly_one_deducible_culprit(example_env_specs):
    """Every generated case is solvable from its own clues, and cases differ from one another."""
    whodunit = load_environment_class(example_env_specs["WhoDunIt"])
    module = sys.modules[whodunit.__module__]
    cases = [module.generate_case(spec["seed"]) for split in ("train", "test") for spec in whodunit.list_tasks(split)]
    for case in cases:
        trace_matches = {s.name for s in case.suspects if s.trait == case.culprit.trait}
        confirmed = {s.name for s in case.suspects if s.alibi_location == case.witnessed_location}
        assert trace_matches - confirmed == {case.culprit_name}
        assert case.crime_scene not in {s.alibi_location for s in case.suspects}
    assert len({c.culprit_name for c in cases}) > 10
    assert len({c.crime_scene for c in cases}) > 3


def _content_words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z]+", text.lower()) if len(w) >= 3} - {"the", "and", "from", "with", "has"}


async def _solve_from_tool_outputs(session) -> str:
    """A scripted detective that deduces the culprit only from what the tools say."""
    suspects = re.findall(r"^- (.+?), the ", _text(await session.call_tool("list_suspects")), re.M)
    prompt = (await session.get_prompt())[0].text
    crime_scene = re.search(r"found dead in the (.+?) of ", prompt).group(1)
    locations = re.search(r"Locations you can inspect: (.+)\.", prompt).group(1).split(", ")
    traits = {}
    for name in suspects:
        said = _text(await session.call_tool("interview", {"suspect": name}))
        traits[name] = said.split(f"you notice that {name} ", 1)[1].rstrip(".")
    scene = _text(await session.call_tool("inspect", {"location": crime_scene}))
    confirmed: set[str] = set()
    for location in locations:
        out = _text(await session.call_tool("inspect", {"location": location}))
        if "confirms that" in out:
            confirmed |= set(out.rsplit(": ", 1)[1].rstrip(".").split(", "))
    trace_words = _content_words(scene.split("you find", 1)[1])
    matching = [n for n in suspects if trace_words & _content_words(traits[n]) and n not in confirmed]
    assert len(matching) == 1, (matching, traits, scene, confirmed)
    return matching[0]


async def test_whodunit_investigation_then_correct_accusation_scores_one(whodunit_env):
    for index in (0, 5):
        async with whodunit_env.session(split="test", index=index) as session:
            culprit = await _solve_from_tool_outputs(session)
            out = await session.call_tool("accuse", {"suspect": culprit})
            assert (out.reward, out.finished) == (1.0, True)
            assert out.metadata == {"accused": culprit, "culprit": culprit}


async def test_whodunit_investigation_tools_give_no_reward(whodunit_env):
    async with whodunit_env.session(split="train", index=1) as session:
        listing = await session.call_tool("list_suspects")
        name = re.search(r"^- (.+?), the ", _text(listing), re.M).group(1)
        for tool, args in [
            ("interview", {"suspect": name}),
            ("inspect", {"location": "nowhere"}),
            ("interview", {"suspect": "Sherlock Holmes"}),
            ("accuse", {"suspect": "Nobody"}),
        ]:
            out = await session.call_tool(tool, args)
            assert (out.reward, out.finished) == (None, False), (tool, args, out)
        assert (listing.reward, listing.finished) == (None, False)


async def test_whodunit_wrong_accusation_scores_zero_then_episode_is_finished(whodunit_env):
    async with whodunit_env.session(split="train", index=2) as session:
        culprit = await _solve_from_tool_outputs(session)
        names = re.findall(r"^- (.+?), the ", _text(await session.call_tool("list_suspects")), re.M)
        innocent = next(n for n in names if n != culprit)
        out = await session.call_tool("accuse", {"suspect": innocent.lower()})  # names match case-insensitively
        assert (out.reward, out.finished) == (0.0, True)
        assert culprit in _text(out)
        with pytest.raises(ToolCallError) as info:
            await session.call_tool("accuse", {"suspect": culprit})
        assert info.value.reason == "episode_finished"


async def test_whodunit_openai_tool_shapes(whodunit_env):
    async with whodunit_env.session(split="train", index=0) as session:
        tools = await session.list_tools(format="openai")
    by_name = {t["name"]: t for t in tools}
    assert set(by_name) == {"list_suspects", "interview", "inspect", "accuse"}
    for spec in tools:
        assert set(spec) == {"type", "name", "description", "parameters"} and spec["type"] == "function"
        assert spec["description"]
    assert by_name["list_suspects"]["parameters"] is None
    interview = by_name["interview"]["parameters"]
    assert interview["type"] == "object" and interview["required"] == ["suspect"]
    assert interview["properties"]["suspect"]["type"] == "string"
    assert "title" not in interview
    assert await whodunit_env.is_assistant_message_final() is False


async def test_whodunit_malformed_calls_are_tool_call_errors_and_session_survives(whodunit_env):
    async with whodunit_env.session(split="train", index=3) as session:
        with pytest.raises(ToolCallError) as unknown:
            await session.call_tool("confess", {})
        assert unknown.value.reason == "not_found"
        for bad in ({}, {"suspect": 42}, {"suspect": ["a", "b"]}):
            with pytest.raises(ToolCallError) as invalid:
                await session.call_tool("interview", bad)
            assert invalid.value.reason == "input_validation", bad
        with pytest.raises(ToolCallError) as shape:
            await session.call_tool("interview", ["not", "a", "dict"])
        assert shape.value.reason == "bad_input_shape"
        out = await session.call_tool("list_suspects")
        assert out.reward is None and "- " in _text(out)


# -- MathEnv ----------------------------------------------------------------------------------


async def test_math_final_plain_message_goes_to_terminal_tool(math_env):
    task: Task = await math_env.get_task("train", 4)
    target = task.task_spec["answer"]
    async with math_env.session(task) as session:
        assert await session.is_assistant_message_final() is True
        terminal = await session.terminal_tool()
        assert (terminal.name, terminal.arg) == ("answer", "answer")
        assert [t["name"] for t in await session.list_tools(format="openai")] == ["calculator"]
        out = await session.call_terminal_tool(f"I worked it out step by step. The answer is {target}.")
        assert (out.reward, out.finished) == (1.0, True)
        with pytest.raises(ToolCallError) as after:
            await session.call_terminal_tool(target)
        assert after.value.reason == "episode_finished"


async def test_math_wrong_or_missing_number_scores_zero(math_env):
    for message in ("The answer is 1000001.", "I am not sure."):
        async with math_env.session(split="test", index=0) as session:
            out = await session.call_terminal_tool(message)
            assert (out.reward, out.finished) == (0.0, True), message


async def test_math_calculator_is_exact_and_reports_errors_as_text(math_env):
    async with math_env.session(split="train", index=0) as session:
        question = (await session.get_prompt())[0].text
        a, b, c = map(int, re.search(r"What is (\d+) \* (\d+) - (\d+)\?", question).groups())
        out = await session.call_tool("calculator", {"expression": f"{a} * {b} - {c}"})
        assert (_text(out), out.reward, out.finished) == (str(a * b - c), None, False)
        assert _text(await session.call_tool("calculator", {"expression": "1/3 + 1/6"})).startswith("1/2 ")
        for hostile in ("__import__('os').system('true')", "9**9**9", "1/0", "x + 1"):
            out = await session.call_tool("calculator", {"expression": hostile})
            assert _text(out).startswith("Error: ") and out.reward is None, hostile


async def test_math_tasks_are_deterministic_with_integer_answers(math_env):
    tasks = [t.task_spec for t in await math_env.list_tasks("train")]
    assert tasks == [t.task_spec for t in await math_env.list_tasks("train")]
    assert len({t["question"] for t in tasks}) == 50
    assert all(re.fullmatch(r"-?\d+", t["answer"]) for t in tasks)


# -- Faulty -----------------------------------------------------------------------------------


async def test_faulty_raising_tool_fails_the_call_then_kills_the_session(faulty_env):
    async with faulty_env.session(split="train", index=0) as session:
        with pytest.raises(ToolFailed) as failed:
            await session.call_tool("explode", {"message": "kaboom"})
        assert "kaboom" in str(failed.value)
        with pytest.raises(SessionTerminatedError):
            await session.call_tool("submit", {"answer": "ok"})


async def test_faulty_wrong_return_and_unencodable_text_are_tool_failures(faulty_env):
    for tool in ("wrong_return", "unencodable"):
        async with faulty_env.session(split="train", index=0) as session:
            with pytest.raises(ToolFailed):
                await session.call_tool(tool)


async def test_faulty_hostile_text_and_megabytes_round_trip_exactly(faulty_env, example_env_specs):
    faulty = sys.modules[load_environment_class(example_env_specs["Faulty"]).__module__]
    async with faulty_env.session(split="train", index=1) as session:
        assert _text(await session.call_tool("garble")) == faulty.GARBLED_TEXT
        big = _text(await session.call_tool("flood", {"megabytes": 3}))
        assert len(big) == 3 * 1024 * 1024 and big.startswith(faulty.FLOOD_LINE)
        out = await session.call_tool("submit", {"answer": "ok"})
        assert (out.reward, out.finished) == (1.0, True)


async def test_faulty_hanging_call_can_be_abandoned_and_the_session_goes_on(faulty_env):
    async with faulty_env.session(split="train", index=2) as session:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(session.call_tool("hang", {"seconds": 3600}), timeout=0.5)
        assert _text(await session.call_tool("hang", {"seconds": 0})) == "slept 0 s"
        out = await session.call_tool("submit", {"answer": "not ok"})
        assert (out.reward, out.finished) == (0.0, True)


# -- GradedGuess --------------------------------------------------------------------------------


async def test_graded_guess_grades_each_estimate_by_closeness(env_server, openreward_client):
    """The quickstart's environment: a reward that falls from 1.0 (exact) to 0.0 at 25% off, and
    0.0 without a positive number."""
    graded = env_server.environment(openreward_client, "GradedGuess")
    task = (await graded.list_tasks("test"))[0]
    product = int(task.task_spec["answer"])
    got = []
    for answer in (
        f"It is {product}.",
        f"About {product * 1.05}.",
        f"Maybe {product * 1.3}",
        "1",
        "no idea",
        f"-{product}",
    ):
        async with graded.session(task) as session:
            out = await session.call_tool("answer", {"answer": answer})
            assert out.finished
            got.append(round(out.reward, 2))
    assert got == [1.0, 0.78, 0.0, 0.0, 0.0, 0.0]
