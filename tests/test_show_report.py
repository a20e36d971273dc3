"""The rollout report (`openreward-rl show FILE --html OUT`) and the terminal listing, from a real
`eval` run: MathEnv, GradedGuess and Faulty served by the SDK's own Server on 127.0.0.1, 3 tasks
each, n=4, driven by a scripted engine that emits real Qwen3 token ids (the model is the only
double; see tests/test_eval.py). The page is checked by parsing it, and in a real headless
Chromium (`browser` marker: skipped where none is installed; scripts/test.sh installs it under CI).
"""

from __future__ import annotations

import asyncio
import collections
import html.parser
import io
import json
import math
import re
from html import escape as html_escape
from pathlib import Path

import pytest
from openreward import AsyncOpenReward
from rich.console import Console

from headless_browser import Browser, find_chromium
from openreward_rl.assets import load_tokenizer
from openreward_rl.cli import main
from openreward_rl.cli.eval import EvalOptions, run_eval
from openreward_rl.config import parse_config, prepare_config
from openreward_rl.engines import FinishReason, Generation, GenerationRequest
from openreward_rl.env.local_server import load_environment_class

N = 4
LOGPROBS = (-0.01, -0.3, -1.2, -0.05, -2.5)  # per sampled token, cycling: a visible confidence scale


class ScriptedModel:
    """MathEnv: task t of the run answers correctly on its first `t % 4` calls, wrong afterwards (groups
    with 0, 1, 2 and 3 successes of 4). GradedGuess: the product times 1, 1.05, 1.1 and 2 on its
    successive calls (graded rewards 1, 0.78, 0.57 and 0). Faulty: calls `explode` (an infrastructure failure)."""

    def __init__(self, tokenizer, math_answers: dict[str, str]) -> None:
        self.tokenizer, self.math_answers = tokenizer, math_answers
        self.calls: collections.Counter[str] = collections.Counter()
        self.correct_calls: dict[str, int] = {}

    def _reply(self, prompt: str) -> str:
        if "Fault-injection" in prompt:
            return '<tool_call>\n{"name": "explode", "arguments": {}}\n</tool_call>'
        product = re.search(r"Estimate (\d+) \* (\d+)", prompt)
        if product:
            key = product.group(0)
            target = int(product.group(1)) * int(product.group(2))
            count = self.calls[key]
            self.calls[key] += 1
            return f"About {round(target * (1, 1.05, 1.1, 2)[count % 4]):,}."
        question, answer = next((q, a) for q, a in self.math_answers.items() if q in prompt)
        correct = self.correct_calls.setdefault(question, len(self.correct_calls) % 4)
        count = self.calls[question]
        self.calls[question] += 1
        return f"The answer is {answer if count < correct else int(answer) + 1}."

    async def generate(self, request: GenerationRequest) -> Generation:
        text = self._reply(self.tokenizer.decode(list(request.input_ids)))
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [
            self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        ]
        return Generation(
            tuple(ids),
            tuple(LOGPROBS[i % len(LOGPROBS)] for i in range(len(ids))),
            FinishReason.STOP,
            matched_stop=ids[-1],
        )

    async def aclose(self) -> None:
        pass


@pytest.fixture(scope="module")
def results(env_server, example_env_specs, tmp_path_factory) -> Path:
    """A real eval run's results file: 3 environments x 3 tasks x 4 samples."""
    math_env = load_environment_class(example_env_specs["MathEnv"])
    answers = {task["question"]: task["answer"] for task in math_env.list_tasks("test")}
    tokenizer = load_tokenizer("offline:qwen3")
    raw = {
        "environments": {
            "MathEnv": {"splits": ["test"], "variant": "mathenv"},
            "GradedGuess": {"splits": ["test"], "variant": "gradedguess"},
            "Faulty": {"splits": ["train"], "variant": "faulty", "max_turns": 2},
        },
        "parser": "hermes",
        "attempts": 1,
        "on_no_tool_call": "end",
    }
    config = prepare_config(parse_config(raw), base_url=env_server.base_url)
    output = tmp_path_factory.mktemp("report") / "results.jsonl"
    options = EvalOptions(
        engine="sglang",
        model="scripted",
        tokenizer="offline:qwen3",
        n=N,
        concurrency=6,
        max_new_tokens=64,
        temperature=1.0,
        top_p=1.0,
        output=output,
        max_tasks=3,
    )

    async def run() -> None:
        client = AsyncOpenReward(api_key="local")
        try:
            await run_eval(
                options,
                config,
                engine=ScriptedModel(tokenizer, answers),
                tokenizer=tokenizer,
                client=client,
                console=Console(file=io.StringIO()),
            )
        finally:
            await client.environments.aclose()

    asyncio.run(run())
    return output


@pytest.fixture(scope="module")
def records(results) -> list[dict]:
    return [json.loads(line) for line in results.read_text().splitlines()]


@pytest.fixture(scope="module")
def report(results, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("html") / "report.html"
    assert main(["show", str(results), "--html", str(out)]) == 0  # the tokenizer comes from the file
    return out


def _group(record: dict) -> str:
    return record["eval_key"].rsplit("|", 1)[0]


def _expected_advantages(records: list[dict]) -> dict[int, float | None]:
    """GRPO with Slime's std normalization, written out here from its definition."""
    by_group: dict[str, list[int]] = collections.defaultdict(list)
    for number, record in enumerate(records):
        by_group[_group(record)].append(number)
    expected: dict[int, float | None] = {}
    for members in by_group.values():
        scored = [n for n in members if records[n]["stop_reason"] not in ("aborted", "env_error", "timeout")]
        rewards = [records[n]["reward"] or 0.0 for n in scored]
        mean = sum(rewards) / len(rewards) if rewards else 0.0
        std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (len(rewards) - 1)) if len(rewards) > 1 else 0.0
        for n in members:
            expected[n] = None
        for n, r in zip(scored, rewards):
            expected[n] = 0.0 if std == 0 else (r - mean) / (std + 1e-6)
    return expected


class _Page(html.parser.HTMLParser):
    """Index rows, group members (with advantages) and the text of sampled-token pieces per episode."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict] = []
        self.groups: dict[str, list[dict]] = {}
        self.tags: set[str] = set()
        self.sources: list[str] = []
        self.tok_text: dict[int, str] = collections.defaultdict(str)
        self._group: str | None = None
        self._episode: int | None = None
        self._tok_depth = 0
        self._span_stack: list[bool] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.add(tag)
        self.sources.extend(v for k, v in attrs if k in ("src", "href") and v and not v.startswith("#"))
        if tag == "tr" and "data-number" in a:
            self.rows.append(a)
        if tag == "div" and "data-group" in a:
            self._group = a["data-group"]
            self.groups[self._group] = []
        if tag == "div" and "data-episode" in a and self._group is not None:
            self.groups[self._group].append(a)
        if tag == "section" and (a.get("id") or "").startswith("episode-"):
            self._episode = int(a["id"].removeprefix("episode-"))
        if tag == "span":
            is_tok = "tok" in (a.get("class") or "").split() and "data-logprob" in a
            self._span_stack.append(is_tok)

    def handle_endtag(self, tag):
        if tag == "span" and self._span_stack:
            self._span_stack.pop()
        if tag == "section":
            self._episode = None

    def handle_data(self, data):
        if self._episode is not None and any(self._span_stack):
            self.tok_text[self._episode] += data


@pytest.fixture(scope="module")
def page(report) -> _Page:
    parsed = _Page()
    parsed.feed(report.read_text())
    return parsed


def test_the_run_varies(records):
    assert len(records) == 3 * 3 * N
    rewards = {round(r["reward"], 2) for r in records if r["task"]["environment"] != "Faulty"}
    assert {0.0, 0.57, 0.78, 1.0} <= rewards
    assert all(r["stop_reason"] == "env_error" for r in records if r["task"]["environment"] == "Faulty")
    assert all(r["eval"]["tokenizer"] == "offline:qwen3" for r in records)


def test_index_lists_every_record(page, records):
    assert [int(row["data-number"]) for row in page.rows] == list(range(len(records)))
    assert [row["data-environment"] for row in page.rows] == [r["task"]["environment"] for r in records]
    assert [row["data-stop"] for row in page.rows] == [r["stop_reason"] for r in records]
    # self-contained: nothing to fetch, no external stylesheet or script
    assert page.sources == [] and "link" not in page.tags and "img" not in page.tags


def test_group_view_shows_each_groups_members_and_advantages(page, records):
    expected = _expected_advantages(records)
    by_group: dict[str, list[int]] = collections.defaultdict(list)
    for number, record in enumerate(records):
        by_group[_group(record)].append(number)
    # the page groups exactly as the eval keys do (same task, different samples)
    page_partition = sorted(sorted(int(m["data-episode"]) for m in members) for members in page.groups.values())
    assert page_partition == sorted(sorted(numbers) for numbers in by_group.values())
    for members in page.groups.values():
        assert len(members) == N
        for member in members:
            want = expected[int(member["data-episode"])]
            if want is None:
                assert "data-advantage" not in member
            else:
                assert float(member["data-advantage"]) == pytest.approx(want, abs=1e-5)
    # the MathEnv groups have 0, 1, 2 and 3 successes of 4: one success is +1.5 against -0.5
    math_advantages = sorted(
        sorted(float(m["data-advantage"]) for m in members)
        for members in page.groups.values()
        if records[int(members[0]["data-episode"])]["task"]["environment"] == "MathEnv"
    )
    assert [-0.5, -0.5, -0.5, 1.5] in [[round(a, 4) for a in group] for group in math_advantages]
    assert [0.0, 0.0, 0.0, 0.0] in math_advantages  # all wrong: std 0, no signal


def test_token_view_shows_the_sampled_text(page, records):
    tokenizer = load_tokenizer("offline:qwen3")
    for number, record in enumerate(records):
        sampled = "".join(tokenizer.decode(turn["sampled_ids"]) for turn in record["turns"])
        assert page.tok_text.get(number, "") == sampled, number
    assert any("The answer is" in text for text in page.tok_text.values())


def test_terminal_listing_lists_every_episode(results, records, capsys):
    assert main(["show", str(results), "--no-color"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if re.match(r"\s*│?\s*\d+\s*│", line)]
    assert len(lines) == len(records)
    assert "infra: env_error" in out and "+1.50" in out and "-0.50" in out
    assert f"{len(records)} episodes · 9 groups" in " ".join(out.split())


def test_a_recorded_tokenizer_that_cannot_load_is_a_note_not_an_error(results, records, tmp_path):
    moved = tmp_path / "other.jsonl"
    moved.write_text(
        "".join(json.dumps({**r, "eval": {**r["eval"], "tokenizer": "offline:nothing"}}) + "\n" for r in records)
    )
    out = tmp_path / "report.html"
    assert main(["show", str(moved), "--html", str(out)]) == 0
    page = out.read_text()
    assert "offline:nothing" in page and "could not be loaded" in page and "rollout logprob mean" in page


chromium = pytest.mark.skipif(
    find_chromium() is None, reason="no Chromium installed (Debian: apt-get install chromium)"
)


@pytest.mark.browser
@chromium
def test_report_in_headless_chromium(report, records, tmp_path):
    faulty = sum(r["task"]["environment"] == "Faulty" for r in records)
    top_reward = max(r["reward"] for r in records if r["reward"] is not None)

    async def check() -> None:
        async with Browser() as browser:
            url = report.resolve().as_uri()
            await browser.open(url)
            assert await browser.evaluate("document.querySelectorAll('#episodes tbody tr').length") == len(records)
            assert await browser.evaluate("document.getElementById('groups').hidden") is False
            assert await browser.evaluate("[...document.querySelectorAll('section.episode')].every(s => s.hidden)")

            # sort by reward, descending: the best first, episodes without a reward last
            await browser.evaluate("document.querySelector('th[data-key=reward]').click()")
            await browser.evaluate("document.querySelector('th[data-key=reward]').click()")
            values = await browser.evaluate(
                "[...document.querySelectorAll('#episodes tbody tr')].map(r => r.cells[4].dataset.value)"
            )
            numbers = [float(v) for v in values if v != ""]
            assert numbers == sorted(numbers, reverse=True) and numbers[0] == top_reward
            assert values[len(numbers) :] == [""] * (len(values) - len(numbers))

            # filter by environment
            await browser.evaluate(
                "(s => { s.value = 'Faulty'; s.dispatchEvent(new Event('input')); })(document.getElementById('filter-env'))"
            )
            visible = await browser.evaluate(
                "[...document.querySelectorAll('#episodes tbody tr')].filter(r => !r.hidden).map(r => r.dataset.environment)"
            )
            assert visible == ["Faulty"] * faulty
            assert (
                await browser.evaluate("document.getElementById('shown').textContent")
                == f"{faulty} of {len(records)} episodes shown"
            )

            # the group view: every group with its members and advantage badges
            await browser.open(url + "#groups")
            groups = await browser.evaluate(
                "[...document.querySelectorAll('.group')].map(g => [...g.querySelectorAll('.member')].map(m => m.querySelector('.badge.adv, .badge.none:last-of-type') && m.dataset.advantage))"
            )
            assert len(groups) == 9 and all(len(members) == N for members in groups)

            # one episode: only its section shows, with its sampled text
            await browser.open(url + "#episode-0")
            shown = await browser.evaluate(
                "[...document.querySelectorAll('section.view')].filter(s => !s.hidden).map(s => s.id)"
            )
            assert shown == ["episode-0"]
            text = await browser.evaluate(
                "[...document.querySelectorAll('#episode-0 .tok')].map(t => t.textContent).join('')"
            )
            tokenizer = load_tokenizer("offline:qwen3")
            assert text == "".join(tokenizer.decode(turn["sampled_ids"]) for turn in records[0]["turns"])

            assert browser.console_errors == []
            fetched = {u for u in browser.requests if not u.startswith(("file:", "data:", "about:"))}
            assert fetched == set()  # works offline: the page asks the network for nothing

    asyncio.run(check())


def test_serve_answers_the_report_on_loopback(results, records):
    """`show FILE --serve` serves the same report on 127.0.0.1 until interrupted."""
    import os
    import signal
    import subprocess
    import sys
    import urllib.request

    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(Path(__file__).resolve().parents[1] / "src"), os.environ.get("PYTHONPATH", "")]
        ),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "openreward_rl.cli", "show", str(results), "--serve"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        line = process.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+/", line).group(0)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(url, timeout=30) as response:
            page = response.read().decode()
        assert response.headers["Content-Type"].startswith("text/html")
        assert page.count("<tr data-number=") == len(records)
        with pytest.raises(urllib.error.HTTPError):
            opener.open(url + "secrets", timeout=30)
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0


def _question(record: dict) -> str:
    content = next(m["content"] for m in record["messages"] if m["role"] == "user")
    return " ".join(content.split())[:40]


def _expected(record: dict) -> str:
    spec = record["task"]["task_spec"]
    return spec.get("answer") or spec["expected"]


def test_index_and_groups_name_each_task_by_its_question_and_expected_answer(report, records):
    """Not just "task 2": the first user message, shortened, and the task spec's expected answer."""
    text = report.read_text()
    rows = dict(re.findall(r'<tr data-number="(\d+)"(.*?)</tr>', text, flags=re.S))
    for number, record in enumerate(records):
        row = rows[str(number)]
        assert html_escape(_question(record)) in row, number
        assert f"expected {html_escape(_expected(record))}" in row, number
    groups = re.findall(
        r'<div class="group" id="group-\d+" data-group="[^"]*">(.*?)<div class="members">(.*?)(?=<div class="group"|$)',
        text,
        flags=re.S,
    )
    head_of = {int(n): head for head, members in groups for n in re.findall(r'data-episode="(\d+)"', members)}
    for number, record in enumerate(records):
        head = head_of[number]
        assert html_escape(_question(record)) in head and f"expected {html_escape(_expected(record))}" in head


@pytest.mark.timeout(30)  # without the remembered request the server would serve on
def test_serve_stops_on_a_ctrl_c_that_python_dropped(capsys):
    """A Ctrl-C whose KeyboardInterrupt Python dropped (raised inside a finalizer) is remembered, and the
    server stops at its next poll instead of serving on."""
    from openreward_rl.cli.interrupts import Interrupts
    from openreward_rl.cli.show import _serve

    assert _serve("<p>report</p>", 0, Interrupts(requested=True)) == 0
    assert "serving the report on http://127.0.0.1:" in capsys.readouterr().out
