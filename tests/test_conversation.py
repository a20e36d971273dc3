"""The one conversation view (`conversation_steps`) that `show` and the uploader read.

Trajectories come from a real episode (the SDK's Server on 127.0.0.1, the real Qwen3 template, the
real ToolEpisode; only the model is scripted), so the recorded `Turn.message_index` is what the loop
wrote, not a value the test chose.
"""

from __future__ import annotations

from observe_fixtures import real_trajectory
from openreward_rl.loop.trajectory import Trajectory
from openreward_rl.observe.conversation import conversation_steps, turns_by_message
from openreward_rl.observe.upload import trajectory_events
from openreward_rl.show.episode import conversation


def test_turns_record_the_assistant_message_they_produced():
    trajectory = real_trajectory()
    roles = [m["role"] for m in trajectory.messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert [t.message_index for t in trajectory.turns] == [2, 4]
    steps = list(conversation_steps(trajectory))
    assert [s.turn_number for s in steps] == [None, None, 0, None, 1, None]
    # each tool message carries the result its call got
    assert [s.result.reward for s in steps if s.message["role"] == "tool"] == [0.25, 1.0]


def _with_injected_assistant_message() -> Trajectory:
    """The real trajectory with an assistant message the environment added after the last turn (a
    custom Episode may do so): the tail no longer lines up with the turns."""
    data = real_trajectory().to_dict()
    data["messages"].append({"role": "assistant", "content": "(the environment's worked example)"})
    return Trajectory.from_dict(data)


def test_recorded_positions_win_over_the_tail():
    trajectory = _with_injected_assistant_message()
    assert {p: n for p, (n, _) in turns_by_message(trajectory).items()} == {2: 0, 4: 1}
    titles = [e.title for e in conversation(trajectory) if e.title.startswith(("turn", "assistant"))]
    assert titles[-1] == "assistant (prompt)" and any(t.startswith("turn 2 ") for t in titles)
    # the uploader pairs the submit result (reward 1.0) with its call, not with the injected message
    rewards = [e.reward for e in trajectory_events(trajectory) if e.reward is not None]
    assert rewards == [0.25, 1.0]


def test_older_dumps_without_positions_align_with_the_last_assistant_messages():
    data = real_trajectory().to_dict()
    for turn in data["turns"]:
        del turn["message_index"]
    trajectory = Trajectory.from_dict(data)
    assert [t.message_index for t in trajectory.turns] == [None, None]
    assert {p: n for p, (n, _) in turns_by_message(trajectory).items()} == {2: 0, 4: 1}


def test_positions_that_name_no_assistant_message_fall_back_to_the_tail():
    data = real_trajectory().to_dict()
    data["turns"][0]["message_index"] = 3  # a tool message: not what a turn produces
    trajectory = Trajectory.from_dict(data)
    assert {p: n for p, (n, _) in turns_by_message(trajectory).items()} == {2: 0, 4: 1}


def test_a_result_without_a_tool_message_follows_its_turn():
    data = real_trajectory().to_dict()
    # a @terminal environment took the plain answer of the second turn: no tool message follows it
    data["messages"] = data["messages"][:4] + [{"role": "assistant", "content": "5"}]
    terminal_call = {"id": "terminal", "name": "__terminal__", "arguments": {"message": "5"}}
    data["turns"][1]["tool_results"] = [dict(data["turns"][1]["tool_results"][0], call=terminal_call, text="correct")]
    steps = list(conversation_steps(Trajectory.from_dict(data)))
    assert steps[-2].turn_number == 1
    assert steps[-1].message is None and steps[-1].result.call.id == "terminal"
    assert [e.title for e in conversation(Trajectory.from_dict(data))][-1] == "__terminal__ (terminal)"
