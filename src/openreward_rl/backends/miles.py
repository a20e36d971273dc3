"""Miles hooks: the Slime hooks adapted to Miles' `Sample` and its two generate forms.

```
--custom-generate-function-path openreward_rl.backends.miles.generate
--custom-rm-path openreward_rl.backends.miles.reward
--rollout-max-context-len 32768
--metadata-key metadata
--dynamic-sampling-filter-path openreward_rl.backends.filters.keep_informative_groups
```

Use `generate`, the legacy function form `(args, sample, sampling_params, evaluation=False)`. Miles'
compatibility layer wraps a function with three or more parameters whose first is not named
`input` exactly as Slime calls it (the `evaluation` rule included), so one code path serves Slime
and Miles, and it does not depend on `GenerateFnInput`/`GenerateFnOutput`, which Miles is still
reshaping. `generate_fn` is the new form, `async def generate_fn(input) -> .samples`, for setups
that want it; it runs the same episode.

Differences from Slime handled here:
- the routing key is `sample.routing_key` (Miles has no `session_id`);
- under `--group-rm` the reward is left None: Miles asserts that a group RM meets no preset reward,
  and `reward` then fills every sample (0.0 for failures and placeholders);
- Miles normalizes fan-out siblings by rollout and requires identical rewards, which the siblings
  get (they share the episode's reward);
- Miles lacks `append_response_tokens`; the fields are set directly (a legacy generate must set
  `loss_mask` itself), with the same rules as on Slime.

Partial rollout: the hooks suspend and resume episodes as on Slime. To park an episode between
turns as soon as the step is aborting, the hook reads the trainer's abort flag: `generate_fn` gets
it from `input.state`; the legacy `generate` from the legacy rollout's `GenerateState` singleton
(`MILES_USE_LEGACY_ROLLOUT_V1=1`, which `--mask-offpolicy-in-partial-rollout` needs anyway). Under
Miles' class-based rollout use `generate_fn` with `--partial-rollout`: the legacy `generate` there
still suspends and resumes a turn cut by the abort, but cannot see the flag between turns, so a
turn that starts after the abort runs to its end (tests/test_partial_rollout_miles.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from openreward_rl.backends._sample.abort import MILES_LEGACY_ROLLOUT_MODULE, singleton_abort_signal, state_abort_signal
from openreward_rl.backends._sample.generate import generate_samples
from openreward_rl.backends.slime import reward

__all__ = ["generate", "generate_fn", "reward", "GenerateOutput"]


async def generate(args: Any, sample: Any, sampling_params: Mapping[str, Any], evaluation: bool = False) -> Any:
    """Run the episode of `sample.metadata` and return `sample` filled (a list after prefix breaks)."""
    return await _generate(args, sample, sampling_params, evaluation, singleton_abort_signal(MILES_LEGACY_ROLLOUT_MODULE))


async def _generate(args: Any, sample: Any, sampling_params: Mapping[str, Any], evaluation: bool, abort_signal: Any) -> Any:
    routing_key, preset_reward = getattr(sample, "routing_key", None), not getattr(args, "group_rm", False)
    return await generate_samples(args, sample, sampling_params, evaluation=evaluation, routing_key=routing_key, preset_reward=preset_reward, abort_signal=abort_signal)


@attrs.frozen
class GenerateOutput:
    """What Miles reads back from a new-form generate: `.samples`."""

    samples: Any


async def generate_fn(input: Any) -> GenerateOutput:  # noqa: A002  (Miles detects the form by this name)
    """Miles' new form: `input` has `.args` (or `.state.args`), `.sample`, `.sampling_params`, `.evaluation`."""
    state = getattr(input, "state", None)
    args = getattr(input, "args", None) or state.args
    evaluation = bool(getattr(input, "evaluation", False))
    return GenerateOutput(samples=await _generate(args, input.sample, input.sampling_params, evaluation, state_abort_signal(state)))
