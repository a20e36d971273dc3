"""One config renders one prompt: `openreward-rl eval` and the Slime training hook build their episode
stack with the same constructor (`Rollouts.from_config`), so the first prompt each sends for the same
task is the same token ids, the config's `thinking: false` included.

Both run against the real local environment server and the SGLang wire-format double; the Slime side
goes through `tests/doubles/slime_double.py` (Slime cannot run here).
"""

from __future__ import annotations

import io
import json

import attrs
import pytest
from rich.console import Console

from openreward_rl.cli.eval import EvalOptions, run_eval
from openreward_rl.config import load_config, prepare_config
from openreward_rl.engines.sglang import SGLangEngine
from openreward_rl.testing import ScriptedCompletion
from test_backend_slime import config_file, make_args, make_sample, run, sglang, tokenizer  # noqa: F401  (fixtures)

pytestmark = pytest.mark.anyio

ANSWER = ScriptedCompletion(text="The answer is 1.")


async def test_eval_and_the_training_hook_send_the_same_first_prompt(
    config_file, sglang, tokenizer, openreward_client, tmp_path
) -> None:  # noqa: F811
    config_file.write_text(
        config_file.read_text() + "chat_template_kwargs:\n  custom_marker: unused\n"
    )  # thinking stays false
    loaded = load_config(str(config_file))
    config = attrs.evolve(
        prepare_config(loaded, split="train"), environments={"MathEnv": loaded.environments["MathEnv"]}
    )
    options = EvalOptions(
        engine="sglang",
        model="offline:qwen3",
        n=1,
        concurrency=1,
        max_new_tokens=32,
        temperature=1.0,
        top_p=1.0,
        max_tasks=1,
        output=tmp_path / "eval.jsonl",
    )
    sglang.push(ANSWER)
    engine = SGLangEngine(sglang.url)
    try:
        await run_eval(
            options,
            config,
            engine=engine,
            tokenizer=tokenizer,
            client=openreward_client,
            console=Console(file=io.StringIO()),
        )
    finally:
        await engine.aclose()
    (row,) = [json.loads(line) for line in (tmp_path / "eval.jsonl").read_text().splitlines()]
    eval_prompt = list(sglang.requests[0].input_ids)

    sglang.push(ANSWER)
    await run(make_args(sglang), make_sample("MathEnv", index=row["task"]["index"]))
    hook_prompt = list(sglang.requests[1].input_ids)

    assert hook_prompt == eval_prompt
    # thinking: false reaches Qwen3's template in both: an empty think block opens the answer
    assert tokenizer.decode(eval_prompt).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
