"""`openreward-rl show` on a dump of real trajectories (the format `openreward-rl eval` writes:
one `Trajectory.to_dict()` per line, with extra keys)."""

from __future__ import annotations

import html.parser

import pytest

from observe_fixtures import qwen3_tokenizer, real_trajectory
from openreward_rl.cli import main
from openreward_rl.loop.trajectory import StopReason, Trajectory
from openreward_rl.observe.dumps import TrajectoryWriter
from openreward_rl.show import mask_spans, render_html
from openreward_rl.task import TaskRef


@pytest.fixture
def dump(tmp_path):
    path = tmp_path / "eval.jsonl"
    hostile = real_trajectory().to_dict()
    hostile["messages"][1]["content"] = "<script>alert(1)</script> & compute"
    failed = Trajectory(
        task=TaskRef("addenv", "train", index=1),
        segments=[],
        turns=[],
        messages=[],
        step_rewards=[],
        reward=None,
        stop_reason=StopReason.ENV_ERROR,
        stop_detail="session died",
    )
    with TrajectoryWriter(path) as writer:
        writer.write(real_trajectory(), model="qwen3", sample=0)
        writer.write(hostile, model="qwen3", sample=1)
        writer.write(failed, model="qwen3", sample=2)
    return path


def test_terminal_shows_turns_calls_results_rewards_and_mask(dump, capsys):
    assert main(["show", str(dump), "--index", "0", "--no-color"]) == 0
    out = capsys.readouterr().out
    assert "\x1b[" not in out
    for expected in (
        "addenv · train · index 0",
        "completed",
        "1.25",
        "step rewards 0.25, 1",
        "I should add first.",
        "turn reward 0.25 · return 1.25",
        "turn reward 1 · return 1",
        "Let me add.",
        "add (call",
        '"answer": "5"',
        "reward 0.25",
        "reward 1",
        "finished the episode",
        "226 prompt + 81 response, 67 trained",
    ):
        assert expected in out, expected
    trajectory = real_trajectory()
    for span in mask_spans(trajectory.segments[-1]):
        assert f"{span.kind:8} {span.start:>6}–{span.end:<6} {span.length} tokens" in out
    assert sum(s.length for s in mask_spans(trajectory.segments[-1]) if s.kind == "trained") == sum(
        trajectory.loss_mask
    )


def test_terminal_colour_and_decoded_spans(dump, capsys, monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert main(["show", str(dump), "--index", "0", "--tokenizer", "offline:qwen3"]) == 0
    out = capsys.readouterr().out
    assert "\x1b[" in out
    assert "<tool_response>" in out and '{"name": "submit", "arguments": {"answer": "5"}}' in out


def test_index_picks_records_and_failures_render(dump, capsys):
    assert main(["show", str(dump), "--index", "-1", "--no-color"]) == 0
    out = capsys.readouterr().out
    assert "record 2 of 3" in out and "env_error (session died)" in out and "none observed" in out
    assert "failed before its first prompt" in out


def test_bad_input_gets_a_clear_error(dump, tmp_path, capsys):
    assert main(["show", str(dump), "--index", "7"]) == 2
    assert "--index 7 is out of range; the file has 3 records" in capsys.readouterr().err
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"task": {}}\nnot json\n')
    assert main(["show", str(broken), "--index", "1"]) == 2
    assert "broken.jsonl:2: not JSON" in capsys.readouterr().err
    not_a_trajectory = tmp_path / "other.jsonl"
    not_a_trajectory.write_text('{"task": {}}\n')
    assert main(["show", str(not_a_trajectory)]) == 2
    assert "record 0: not a trajectory (missing key" in capsys.readouterr().err
    assert main(["show", str(tmp_path / "missing.jsonl")]) == 2
    assert "no such file" in capsys.readouterr().err


class _Collect(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.trained: list[str] = []
        self._open_spans: list[bool] = []  # per open span: is it a trained span
        self.text: list[str] = []

    @property
    def _in_trained(self) -> bool:
        return any(self._open_spans)

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "span":
            trained = ("class", "span-trained") in attrs
            self._open_spans.append(trained)
            if trained:
                self.trained.append("")

    def handle_endtag(self, tag):
        if tag == "span" and self._open_spans:
            self._open_spans.pop()

    def handle_data(self, data):
        self.text.append(data)
        if self._in_trained:
            self.trained[-1] += data


def test_html_page_is_self_contained_escaped_and_highlights_trained_tokens(dump, tmp_path, capsys):
    out = tmp_path / "page.html"
    assert main(["show", str(dump), "--index", "1", "--html", str(out), "--tokenizer", "offline:qwen3"]) == 0
    page = out.read_text()
    parsed = _Collect()
    parsed.feed(page)
    assert "script" not in parsed.tags and "link" not in parsed.tags and "img" not in parsed.tags
    assert "<script>alert(1)</script> & compute" in "".join(parsed.text)  # shown as text, not markup
    trajectory = real_trajectory()
    tokenizer = qwen3_tokenizer()
    expected = [
        tokenizer.decode(trajectory.tokens[s.start : s.end], skip_special_tokens=False)
        for s in mask_spans(trajectory.segments[-1])
        if s.kind == "trained"
    ]
    assert parsed.trained == expected  # exactly the sampled turns are highlighted
    assert "<tool_response>" not in "".join(parsed.trained)


def test_html_without_tokenizer_lists_span_counts():
    page = render_html(real_trajectory())
    assert "[trained: tokens 226–264, 38 tokens; rollout logprob mean" in page and "--tokenizer" in page
