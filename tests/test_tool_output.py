from openreward_rl.assets import load_tokenizer
from openreward_rl.env.tool_output import clean_tool_text
from openreward_rl.families.chat import ChatRenderer


def test_control_characters_and_surrogates_are_made_safe() -> None:
    renderer = ChatRenderer(load_tokenizer("offline:qwen3"))
    text, truncated = clean_tool_text("ok\x00\x07 bell\tTab\nline \ud800 end", renderer, 100)
    assert text == "ok bell\tTab\nline \ufffd end"
    assert not truncated


def test_output_over_budget_is_cut_at_the_token_limit_with_a_marker() -> None:
    renderer = ChatRenderer(load_tokenizer("offline:qwen3"))
    text, truncated = clean_tool_text("word " * 5000, renderer, 50)
    assert truncated
    body, marker = text.split("\n[... tool output truncated", 1)
    assert len(renderer.encode(body)) <= 50
    assert "50 tokens" in marker


def test_megabytes_are_cut_without_tokenizing_everything() -> None:
    renderer = ChatRenderer(load_tokenizer("offline:qwen3"))
    text, truncated = clean_tool_text("x" * 5_000_000, renderer, 100)
    assert truncated and len(text) < 5_000
