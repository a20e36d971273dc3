"""Side by side on one GPU: TRL's own generation, TRL's own tool loop, and `train --framework trl`.

Same model (fresh fp32 weights loaded for each side), task set, batch (`--tasks` x `--n`), learning rate,
temperature, max tokens per reply and seed; each side trains `--warmup` + `--steps` GRPO steps and the
timed steps are reported: seconds per step, sampled tokens per second (tokens the model sampled, tool
and prompt tokens excluded), episodes per second, mean reward, and peak GPU memory allocated.

- `trl`: a plain `GRPOTrainer` (TRL samples one reply per prompt with `model.generate`); the reward
  function hands each reply to the environment as our episodes do (parsed by the config's parser: a
  tool call runs that tool, a plain reply goes to the environment's terminal tool).
- `trl-tools`: `GRPOTrainer(environment_factory=...)`, TRL's own multi-turn tool loop, over the same
  environment: an environment class whose methods are the environment's tools (built from its tool
  specs), with a session per episode. SmolLM2's chat template has no tool support, so TRL's tool-call
  parsing (`parse_response`) and its template check (`supports_tool_calling`) are bridged to the
  config's parser: both sides read replies the same way. TRL stops an episode when a reply has no tool
  call or after `max_turns - 1` tool rounds.
- `ours`: `TrlSession` (what `train --framework trl` runs): every episode through the config's
  `Rollouts` on the embedded sampler, `WaveEngine` (the default `--sampler waves`);
- `ours-continuous`: the same on `TransformersEngine` (`--sampler continuous`, transformers' continuous
  batching). Each `ours` side starts from the same fresh weights.

    python benchmarks/trl_side_by_side.py --config examples/quickstart_config.yaml \\
        --serve examples/environments/closest_guess.py:GradedGuess --split train --tasks 8 --n 8 --max-new-tokens 64 --bf16
    python benchmarks/trl_side_by_side.py --config examples/train_paint_room_config.yaml \\
        --serve examples/environments/paint_room.py:PaintRoom --plugin examples/reply_as_call.py --tasks 8 --n 8 --bf16

Prints one line per side and, with `--json FILE`, writes the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

JSON_TYPES = {"string": "str", "integer": "int", "number": "float", "boolean": "bool"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True)
    parser.add_argument(
        "--serve", required=True, metavar="FILE.py:Class", help="the environment class to serve on 127.0.0.1"
    )
    parser.add_argument(
        "--plugin", action="append", default=[], help="a Python file to import first (e.g. one registering a parser)"
    )
    parser.add_argument("--split", default=None, help="the split to train on (default: the config's)")
    parser.add_argument("--model", default="offline:smollm2")
    parser.add_argument(
        "--random-weights",
        action="store_true",
        help="--model is a folder with config.json and tokenizer files only: random weights of that shape (seeded); "
        "every reply then runs to --max-new-tokens on every side, so the sides sample the same lengths",
    )
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--tasks", type=int, default=8, help="prompts per step")
    parser.add_argument("--n", type=int, default=8, help="samples per prompt (GRPO group)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    parser.add_argument("--steps", type=int, default=3, help="timed steps")
    parser.add_argument(
        "--micro-batch",
        type=int,
        default=None,
        help="our side's episodes per forward and backward pass (TrlOptions.micro_batch; 0: the whole step in one; default: the library's)",
    )
    parser.add_argument("--sides", default="trl,trl-tools,ours")
    parser.add_argument(
        "--gpu-memory-fraction",
        type=float,
        default=None,
        help="the most of the GPU's memory this process may hold (torch's per-process cap; for several runs on one GPU)",
    )
    parser.add_argument("--json", default=None, metavar="FILE")
    return parser.parse_args(argv)


class StepClock:
    """A TrainerCallback recording each step's wall time (from the start of its generation to its optimizer step)."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self._started = 0.0

    def callback(self) -> Any:
        from transformers import TrainerCallback

        clock = self

        class Clock(TrainerCallback):
            def on_step_begin(self, args: Any, state: Any, control: Any, **_: Any) -> None:
                import torch

                torch.cuda.synchronize() if torch.cuda.is_available() else None
                clock._started = time.perf_counter()

            def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
                import torch

                torch.cuda.synchronize() if torch.cuda.is_available() else None
                clock.seconds.append(time.perf_counter() - clock._started)
                print(
                    f"  step {len(clock.seconds)}: {clock.seconds[-1]:.2f} s", file=sys.stderr, flush=True
                )  # a side cut short keeps its steps

        return Clock()


class Bridge:
    """The environment as TRL's sides see it, over the session's SDK client and event loop (calls block)."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.adapter = session.adapter
        self.parser = session.adapter.rollouts.parser
        self.config = session.config
        first = session.train_tasks[0]
        self.specs, self.system = self.adapter.run(self._tools_and_system(first))

    async def _tools_and_system(self, task: Any) -> tuple[list[dict[str, Any]], str | None]:
        """The tools and the system prompt our episodes show (tool preamble included), so both sides show the same tools."""
        from openreward_rl.loop.episode import first_system_prompt

        async with self.open(task) as env:
            specs = await env.tools()
        config = self.config
        system = first_system_prompt(
            config.system_prompt_template,
            specs,
            self.adapter.rollouts.renderer,
            parser=self.parser,
            tool_preamble=config.tool_preamble,
            example=config.tool_call_example,
        )
        return specs, system

    def open(self, task: Any) -> Any:
        from openreward_rl.env.environment import open_session
        from openreward_rl.loop.rollout import resolve_task

        return open_session(
            self.adapter.rollouts.client, resolve_task(self.config, task), tool_timeout=self.config.tool_timeout
        )

    def messages(self, task: Any) -> list[dict[str, Any]]:
        async def prompt() -> list[dict[str, Any]]:
            async with self.open(task) as env:
                return await env.prompt_messages()

        system = [{"role": "system", "content": self.system}] if self.system else []
        return system + self.adapter.run(prompt())

    def parse(self, text: str) -> Any:
        return self.parser.parse(text, tools=self.specs)

    def respond(self, env: Any, text: str, state: dict[str, Any]) -> str | None:
        """One reply handed to an open session as our episodes hand it; the environment's text, None without a call."""
        return self.adapter.run(self.respond_async(env, text, state))

    async def respond_async(self, env: Any, text: str, state: dict[str, Any]) -> str | None:
        parsed = self.parse(text)
        if parsed.tool_calls:
            return await self.call_tools(env, [(call.name, call.arguments) for call in parsed.tool_calls], state)
        if not parsed.has_tool_activity and await env.terminal_tool() is not None:
            return self.record([await env.call_terminal_tool(parsed.content)], state)
        return None

    async def call_tools(self, env: Any, calls: list[tuple[str, Any]], state: dict[str, Any]) -> str:
        return self.record([await env.call_tool(name, arguments) for name, arguments in calls], state)

    def record(self, outcomes: list[Any], state: dict[str, Any]) -> str:
        for outcome in outcomes:
            state["rewards"] += [outcome.reward] if outcome.reward is not None else []
            state["finished"] = state["finished"] or outcome.finished
        return "\n".join(o.text for o in outcomes)

    def reward(self, state: dict[str, Any]) -> float:
        return float(sum(state["rewards"]))

    # -- TRL's plain GRPOTrainer: one reply per prompt ---------------------------------------------

    def plain_reward(self) -> Any:
        """TRL's reward function for the plain side: each completion scored on its own session, all of a batch's
        sessions at once (as a TRL user scoring on a remote environment would), replies read as ours are."""
        from openreward_rl.env.tasks import task_from_metadata

        async def score(text: str, row: str) -> float:
            state = {"rewards": [], "finished": False}
            async with self.open(task_from_metadata(row)) as env:
                await self.respond_async(env, text, state)
            return self.reward(state)

        async def score_all(completions: list[Any], task: list[str]) -> list[float]:
            texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
            return list(await asyncio.gather(*(score(text, row) for text, row in zip(texts, task))))

        def openreward_reward(prompts: list[Any], completions: list[Any], task: list[str], **_: Any) -> list[float]:
            return self.adapter.run(score_all(completions, task))

        return openreward_reward

    @contextlib.contextmanager
    def _session(self, task: Any) -> Any:
        stack = contextlib.AsyncExitStack()
        env = self.adapter.run(stack.enter_async_context(self.open(task)))
        try:
            yield env
        finally:
            self.adapter.run(stack.aclose())

    # -- TRL's tool loop: environment_factory ------------------------------------------------------

    def environment_class(self) -> type:
        """A class whose public methods are the environment's tools (TRL reads their signatures and docstrings)."""
        bridge = self
        namespace: dict[str, Any] = {}
        source = []
        for spec in self.specs:
            function = spec["function"]
            properties = function.get("parameters", {}).get("properties", {})
            names = list(properties)
            params = ", ".join(f"{name}: {JSON_TYPES.get(properties[name].get('type'), 'str')}" for name in names)
            args_doc = "".join(f"\n        {name}: {properties[name].get('description') or name}" for name in names)
            doc = (function.get("description") or function["name"]).replace('"""', "'")
            call = ", ".join(f"{n!r}: {n}" for n in names)
            source.append(
                f'def {function["name"]}(self, {params}) -> str:\n    """{doc}\n\n    Args:{args_doc}\n    """\n'
                f"    return self._call({function['name']!r}, {{{call}}})\n"
            )
        exec("\n".join(source), namespace)  # noqa: S102 - tool methods built from the environment's own specs
        tools = {name: value for name, value in namespace.items() if callable(value) and not name.startswith("__")}

        class OpenRewardEpisode:
            def __init__(self) -> None:
                self._stack: contextlib.AsyncExitStack | None = None
                self._env: Any = None
                self.state: dict[str, Any] = {"rewards": [], "finished": False}

            def reset(self, task: str | None = None, **_: Any) -> None:
                from openreward_rl.env.tasks import task_from_metadata

                self._close()
                self.state = {"rewards": [], "finished": False}
                self._stack = contextlib.AsyncExitStack()
                self._env = bridge.adapter.run(self._stack.enter_async_context(bridge.open(task_from_metadata(task))))
                return None  # the prompt is the dataset row's

            def _call(self, name: str, arguments: dict[str, Any]) -> str:
                outcome = bridge.adapter.run(self._env.call_tool(name, arguments))
                self.state["rewards"] += [outcome.reward] if outcome.reward is not None else []
                self.state["finished"] = self.state["finished"] or outcome.finished
                return outcome.text

            def _close(self) -> None:
                if self._stack is not None:
                    bridge.adapter.run(self._stack.aclose())
                    self._stack, self._env = None, None

        for name, function in tools.items():
            setattr(OpenRewardEpisode, name, function)
        return OpenRewardEpisode

    def tool_reward(self, scored: list[float] | None = None) -> Any:
        """TRL's reward function for the tool loop; each batch's rewards are also appended to `scored`."""

        def openreward_reward(
            prompts: list[Any], completions: list[Any], environments: list[Any], **_: Any
        ) -> list[float]:
            rewards = []
            for completion, episode in zip(completions, environments):
                last = completion[-1] if completion else {}
                if not episode.state["finished"] and last.get("role") == "assistant":
                    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in last.get("tool_calls") or []]
                    if calls:  # the last round's calls, which TRL leaves unrun past max_tool_calling_iterations: our loop runs a turn's calls
                        self.adapter.run(self.call_tools(episode._env, calls, episode.state))
                    else:  # a plain last reply: the terminal tool
                        self.respond(episode._env, last.get("content") or "", episode.state)
                rewards.append(self.reward(episode.state))
                episode._close()
            if scored is not None:
                scored.extend(rewards)
            return rewards

        return openreward_reward

    def patch_trl(self) -> None:
        """TRL's response parsing and tool-template check, bridged to the config's parser (SmolLM2's template has no tools)."""
        import trl.trainer.grpo_trainer as grpo

        bridge = self

        def parse_response(tokenizer: Any, ids: list[int], prefix: Any = None, tools: Any = None) -> dict[str, Any]:
            text = tokenizer.decode(ids, skip_special_tokens=True)
            parsed = bridge.parse(text)
            message: dict[str, Any] = {"role": "assistant", "content": parsed.content}
            if parsed.tool_calls:
                message["tool_calls"] = [
                    {"type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                    for c in parsed.tool_calls
                ]
            return message

        grpo.parse_response = parse_response
        grpo.supports_tool_calling = lambda processing_class: True
        grpo.is_chat_template_prefix_preserving = lambda processing_class: True


def peer_grpo_args(options: Any, output_dir: str, *, max_turns: int | None = None) -> Any:
    """TRL's own `GRPOConfig` for a TRL side, as its users write it: TRL's defaults (gradient checkpointing on,
    among them) with only what both sides share set: learning rate, batch (`--tasks` x `--n` in one generation
    per optimizer step, as ours), group size, temperature, seed, precision, beta, steps. A single-turn side caps
    the reply at `max_new_tokens` (`max_completion_length`). TRL's tool loop (`max_turns`) gets the per-turn
    cap a TRL user sets for it, `generation_kwargs={"max_new_tokens": ...}` (TRL passes those to every turn's
    `generate`), and `max_completion_length` caps the whole episode: each turn's reply and as many tokens again
    for a tool's answer, so the episode is not cut where ours (per-reply cap, no episode cap) goes on."""
    from trl import GRPOConfig

    shared = dict(
        output_dir=output_dir,
        max_steps=options.max_steps,
        learning_rate=options.lr,
        temperature=options.temperature,
        top_p=options.top_p,
        beta=options.beta,
        seed=options.seed,
        bf16=options.bf16,
        use_cpu=options.resolved_device == "cpu",
        per_device_train_batch_size=options.prompts_per_step * options.n_samples,
        gradient_accumulation_steps=1,
        num_generations=options.n_samples,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        log_completions=False,
    )
    if max_turns is None:
        return GRPOConfig(**shared, max_completion_length=options.max_new_tokens)
    return GRPOConfig(
        **shared,
        max_tool_calling_iterations=max(max_turns - 1, 0),
        generation_kwargs={"max_new_tokens": options.max_new_tokens},
        max_completion_length=2 * options.max_new_tokens * max_turns,
    )


def peer_settings(trainer: Any) -> dict[str, Any]:
    """The TRL side's settings as its trainer holds them, printed beside its figures."""
    args = trainer.args
    return {
        "gradient_checkpointing": args.gradient_checkpointing,
        "bf16": args.bf16,
        "temperature": args.temperature,
        "max_completion_length": args.max_completion_length,
        "per_turn_max_new_tokens": trainer.generation_kwargs.get("max_new_tokens"),
        "max_tool_calling_iterations": args.max_tool_calling_iterations,
        "beta": args.beta,
        "learning_rate": args.learning_rate,
        "per_device_train_batch_size": args.per_device_train_batch_size,
        "gradient_accumulation_steps": args.gradient_accumulation_steps,
    }


def count_sampled(trainer: Any) -> list[int]:
    """Tokens TRL's generation sampled, per call of `_generate_single_turn` (tool rounds included)."""
    counts: list[int] = []
    original = trainer._generate_single_turn

    def counting(*args: Any, **kwargs: Any) -> Any:
        completion_ids, logprobs = original(*args, **kwargs)
        counts.append(sum(len(ids) for ids in completion_ids))
        return completion_ids, logprobs

    trainer._generate_single_turn = counting
    return counts


RANDOM_WEIGHTS = False


class WaveLog(logging.Handler):
    """`WaveEngine`'s debug record of each wave, kept as (requests, sampled tokens, seconds)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.rows: list[tuple[int, int, float]] = []

    def emit(self, record: logging.LogRecord) -> None:
        requests, tokens, seconds = record.args  # type: ignore[misc]
        self.rows.append((int(requests), int(tokens), round(float(seconds), 3)))

    @contextlib.contextmanager
    def recording(self) -> Any:
        engine_logger = logging.getLogger("openreward_rl.engines.waves")
        level = engine_logger.level
        engine_logger.setLevel(logging.DEBUG)
        engine_logger.addHandler(self)
        try:
            yield
        finally:
            engine_logger.removeHandler(self)
            engine_logger.setLevel(level)


OURS = {"ours": "waves", "ours-continuous": "continuous"}


def use_sampler(session: Any, sampler: str, options: Any) -> None:
    """Fresh weights in the session's model and its adapter on `sampler` (its next step builds that engine)."""
    fresh, _ = fresh_model(options)
    session.model.load_state_dict(fresh.state_dict())
    del fresh
    session.adapter.sampler = sampler


def fresh_model(options: Any) -> tuple[Any, Any]:
    import torch

    from openreward_rl.backends.trl import trainable_gguf
    from openreward_rl.engines.transformers import load_model

    torch.manual_seed(options.seed)
    if RANDOM_WEIGHTS:
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

        with torch.device(options.resolved_device):  # initialised in place: an 8B model in seconds on a GPU
            model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(options.model), dtype=torch.float32)
        return model.eval(), AutoTokenizer.from_pretrained(options.model)
    model, tokenizer = load_model(options.model, device=options.resolved_device, dtype="float32")
    return trainable_gguf(model), tokenizer


def run_side(
    side: str, session: Any, bridge: Any, options: Any, args: argparse.Namespace, workdir: str
) -> dict[str, Any]:
    import torch
    from datasets import Dataset

    from openreward_rl.backends.trl import quiet_trainer, task_prompt

    cuda = torch.cuda.is_available() and options.resolved_device.startswith("cuda")

    def start_peak() -> None:
        # each side's peak counts its own model and nothing else: ours trains the session's model, a TRL side
        # builds its own while the session's waits in host memory (`run_side` puts it back after)
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()

    clock = StepClock()
    sampled: list[int] = []
    rewards: list[float] = []
    max_turns = session.config.environment(session.train_tasks[0].environment).max_turns or 1
    rollout_seconds: list[float] = []
    first_prompts: list[int] = []
    waves = WaveLog()
    if side in OURS:
        use_sampler(session, OURS[side], options)
        start_peak()
        trainer = session.trainer(callbacks=[clock.callback()])
        rollout = trainer.rollout_func

        def recording(prompts: Any, trainer_: Any) -> Any:
            started = time.perf_counter()
            out = rollout(prompts, trainer_)
            rollout_seconds.append(time.perf_counter() - started)
            sampled.append(sum(sum(t.loss_mask) for t in session.adapter.last_trajectories))
            first_prompts.extend(len(t.segments[0].prompt_ids) for t in session.adapter.last_trajectories if t.segments)
            rewards.extend(r for r in out["trained_reward"] if r is not None)
            return out

        trainer.rollout_func = recording
        settings = {
            "gradient_checkpointing": trainer.args.gradient_checkpointing,
            "bf16": trainer.args.bf16,
            "temperature": trainer.args.temperature,
            "per_turn_max_new_tokens": options.max_new_tokens,
            "learning_rate": trainer.args.learning_rate,
            "per_device_train_batch_size": trainer.args.per_device_train_batch_size,
            "gradient_accumulation_steps": trainer.args.gradient_accumulation_steps,
        }
    else:
        from trl import GRPOTrainer

        session.model.to("cpu")
        start_peak()
        model, tokenizer = fresh_model(options)
        rows = [{"prompt": bridge.messages(task), "task": task_prompt(task)} for task in session.train_tasks]
        first_prompts.extend(
            len(
                tokenizer.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=True, return_dict=False)
            )
            for r in rows
        )
        if side == "trl":
            reward = bridge.plain_reward()
            trainer = GRPOTrainer(
                model=model,
                processing_class=tokenizer,
                reward_funcs=[reward],
                args=peer_grpo_args(options, f"{workdir}/{side}"),
                train_dataset=Dataset.from_list(rows),
                callbacks=[clock.callback()],
            )
        else:
            bridge.patch_trl()
            tokenizer.response_template = (
                "bridged: benchmarks/trl_side_by_side.py parses replies with the config's parser"
            )
            trainer = GRPOTrainer(
                model=model,
                processing_class=tokenizer,
                reward_funcs=[bridge.tool_reward(rewards)],
                args=peer_grpo_args(options, f"{workdir}/{side}", max_turns=max_turns),
                train_dataset=Dataset.from_list(rows),
                environment_factory=bridge.environment_class(),
                callbacks=[clock.callback()],
            )
        settings = peer_settings(trainer)
        counts = count_sampled(trainer)
        calls_before = [0]

        def on_step(_: Any = None) -> None:
            sampled.append(sum(counts[calls_before[0] :]))
            calls_before[0] = len(counts)

        from transformers import TrainerCallback

        class Tokens(TrainerCallback):
            def on_step_end(self, a: Any, state: Any, control: Any, **_: Any) -> None:
                on_step()

        trainer.add_callback(Tokens())
    quiet_trainer(trainer)
    with waves.recording():
        trainer.train()
    if side == "trl":  # the tool loop's and ours are recorded as they are scored
        rewards = [float(x) for x in trainer._logs["rewards"][next(iter(trainer._logs["rewards"]))] if x == x]
    timed = clock.seconds[args.warmup :]
    tokens = sampled[args.warmup :]
    episodes = options.episodes_per_step
    result = {
        "side": side,
        "steps": len(timed),
        "s_per_step": sum(timed) / len(timed),
        "step_seconds": [round(s, 3) for s in clock.seconds],
        "sampled_tokens_per_step": sum(tokens) / len(tokens),
        "sampled_tokens_per_s": sum(tokens) / sum(timed),
        "episodes_per_s": episodes * len(timed) / sum(timed),
        "reward_mean_last": sum(rewards[-episodes:]) / max(len(rewards[-episodes:]), 1),
        "reward_per_step": [
            round(sum(chunk) / len(chunk), 4)
            for i in range(0, len(rewards), episodes)
            if (chunk := rewards[i : i + episodes])
        ],
        "peak_gpu_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
        "first_prompt_tokens": sum(first_prompts) / max(len(first_prompts), 1),
        "settings": settings,
        "rollout_seconds": [round(x, 3) for x in rollout_seconds],  # ours: TRL's call into the adapter, per step
        "waves": waves.rows,  # ours on WaveEngine: (requests, sampled tokens, seconds) per wave, in order
    }
    if side not in OURS:
        del trainer, model
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
        session.model.to(options.resolved_device)
    else:
        session._trainer = None
    return result


def main(argv: list[str] | None = None) -> None:
    import torch

    from openreward_rl.backends.trl import TrlOptions, TrlSession
    from openreward_rl.config import load_config, prepare_config
    from openreward_rl.env.local_server import import_file, load_environment_class

    args = parse_args(argv)
    global RANDOM_WEIGHTS
    RANDOM_WEIGHTS = args.random_weights
    for path in args.plugin:
        import_file(Path(path))
    config = load_config(args.config)
    if args.split:
        config = prepare_config(config, split=args.split)
    options = TrlOptions(
        model=args.model,
        device=args.device,
        bf16=args.bf16,
        max_steps=args.warmup + args.steps,
        prompts_per_step=args.tasks,
        n_samples=args.n,
        lr=args.lr,
        temperature=args.temperature,
        max_new_tokens=args.max_new_tokens,
        save_interval=0,
        seed=args.seed,
        micro_batch=args.micro_batch,
    )
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    if args.gpu_memory_fraction and torch.cuda.is_available():
        torch.cuda.set_per_process_memory_fraction(args.gpu_memory_fraction)
    import transformers
    import trl

    print(
        f"device {gpu}; torch {torch.__version__}, transformers {transformers.__version__}, trl {trl.__version__}; {args.model}, "
        f"bf16 {args.bf16}; {args.tasks} tasks x {args.n} samples, <= {args.max_new_tokens} tokens a reply, lr {args.lr}, seed {args.seed}; "
        f"{args.warmup} warm-up + {args.steps} timed steps",
        flush=True,
    )
    results = []
    with tempfile.TemporaryDirectory() as workdir:
        options = attrs_evolve(options, output_dir=workdir)
        model, tokenizer = fresh_model(options)
        with TrlSession.open(
            config, options, serve=[load_environment_class(args.serve)], model=model, tokenizer=tokenizer
        ) as session:
            if len(session.train_tasks) < args.tasks:  # TRL would form no batch and train no step
                raise SystemExit(f"--tasks {args.tasks}: the split has only {len(session.train_tasks)} tasks")
            bridge = Bridge(session)
            for side in args.sides.split(","):
                try:
                    result = run_side(side, session, bridge, session.options, args, workdir)
                except Exception as error:  # one side failing must not lose the others' figures
                    import traceback

                    traceback.print_exc()
                    result = {"side": side, "error": f"{type(error).__name__}: {error}"}
                results.append(result)
                print(json.dumps(result), flush=True)
    print(
        f"\n{'side':<16} {'s/step':>8} {'sampled tok/s':>14} {'episodes/s':>11} {'tok/step':>9} {'reward':>7} {'peak GiB':>9} {'prompt':>7}  settings"
    )
    for r in results:
        if "error" in r:
            print(f"{r['side']:<16} failed: {r['error'][:100]}")
            continue
        peak = f"{r['peak_gpu_gib']:.2f}" if r["peak_gpu_gib"] is not None else "-"
        print(
            f"{r['side']:<16} {r['s_per_step']:>8.2f} {r['sampled_tokens_per_s']:>14,.0f} {r['episodes_per_s']:>11.1f} "
            f"{r['sampled_tokens_per_step']:>9.0f} {r['reward_mean_last']:>7.3f} {peak:>9} {r['first_prompt_tokens']:>7.0f}  {r['settings']}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"device": gpu, "args": vars(args), "results": results}, indent=2))


def attrs_evolve(options: Any, **changes: Any) -> Any:
    import attrs

    return attrs.evolve(options, **changes)


if __name__ == "__main__":
    main()
