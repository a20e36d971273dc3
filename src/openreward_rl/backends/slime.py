"""Slime hooks: one OpenReward episode per `generate` call, and the matching reward hook.

```
--custom-generate-function-path openreward_rl.backends.slime.generate
--custom-rm-path openreward_rl.backends.slime.reward
--rollout-max-context-len 32768        # the episode's token budget (Slime does not enforce it itself)
--metadata-key metadata                # rows written by `openreward-rl prepare`
--dynamic-sampling-filter-path openreward_rl.backends.filters.keep_informative_groups   # recommended
```

The process builds its state once from `args` (see `_sample/state.py`): `SGLangEngine` on
`http://{sglang_router_ip}:{sglang_router_port}`, the tokenizer of `hf_checkpoint`, the training
config from `$OPENREWARD_RL_CONFIG` / `$TRAIN_CONFIG`, the tool parser and an `AsyncOpenReward` client.

`generate` sends `sample.session_id` as the routing key (`X-SMG-Routing-Key`) whenever the sample
has one, under every `--router-policy`: it pins an episode's turns to one worker under
`consistent_hashing` and is ignored otherwise. `sampling_params` pass through unchanged except
`max_new_tokens`, clamped per turn to what the context budget leaves. An engine abort the trainer
ordered (`GenerateState.aborted`) ends the episode as ABORTED at once and is never retried; one it
did not order (a weight update's `/pause_generation` under fully-async rollout) is continued in
place from the turn's tokens, at most `max_turn_continuations` times (config, default 3). See `_sample/fill.py` for how a trajectory fills the
`Sample` (statuses, placeholders, fan-out with a shared `rollout_id`).

Under `--partial-rollout` an episode the trainer aborts is suspended with its environment session
open and resumed when its sample comes back (see `_sample/partial.py`, `loop/resumable.py` and the long-tail
section of docs/training.md); the hook reads Slime's `GenerateState.aborted` to park episodes
between turns as soon as the step is aborting.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from openreward_rl.backends._sample.abort import SLIME_ROLLOUT_MODULE, singleton_abort_signal
from openreward_rl.backends._sample.generate import generate_samples
from openreward_rl.backends._sample.reward import group_rewards
from openreward_rl.backends._sample.state import state_for

__all__ = ["generate", "reward"]


async def generate(args: Any, sample: Any, sampling_params: Mapping[str, Any], evaluation: bool = False) -> Any:
    """Run the episode of `sample.metadata` and return `sample` filled (a list after prefix breaks).

    The parameter named `evaluation` matters: Slime passes `evaluation=True` in its eval loop only to
    a function with a parameter of exactly that name; eval episodes use `--eval-max-context-len`.
    """
    routing_key, abort_signal = getattr(sample, "session_id", None), singleton_abort_signal(SLIME_ROLLOUT_MODULE)
    return await generate_samples(
        args,
        sample,
        sampling_params,
        evaluation=evaluation,
        routing_key=routing_key,
        preset_reward=True,
        abort_signal=abort_signal,
    )


async def reward(args: Any, sample_or_samples: Any, **kwargs: Any) -> Any:
    """The episode's reward for one sample; for a list (fan-out, or the group under `--group-rm`),
    one reward per sample, from the environment's `score_group` under `--group-rm` where it has one."""
    if isinstance(sample_or_samples, list):
        group_rm = bool(getattr(args, "group_rm", False))
        state = state_for(args) if group_rm else None
        return await group_rewards(
            sample_or_samples,
            group_rm=group_rm,
            client=state.client if state else None,
            config=state.config if state else None,
        )
    return (await group_rewards([sample_or_samples], group_rm=False))[0]
