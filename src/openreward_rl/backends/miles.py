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

A fault of the setup ends the rollout step, never one group: Miles' class-based rollout
(`miles/rollout/inference_rollout/inference_rollout_train.py`, the default) logs any `Exception` a group
raises, drops the group and draws the next, so a refused config (a `ConfigError`, such as a context
policy named under `--group-rm`) or a hook output its group RM cannot take would repeat for every group
while nothing trains. The hooks raise those as `RolloutStepError`, which is a `BaseException`: it passes
that `except Exception`, fails the step (Ray reports it as the rollout actor's task error) and says why.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import attrs

from openreward_rl.backends._sample.abort import MILES_LEGACY_ROLLOUT_MODULE, singleton_abort_signal, state_abort_signal
from openreward_rl.backends._sample.generate import generate_samples
from openreward_rl.backends._sample.state import one_sample_rule
from openreward_rl.backends.slime import reward as slime_reward
from openreward_rl.config import ConfigError

__all__ = ["generate", "generate_fn", "reward", "GenerateOutput", "RolloutStepError", "step_errors"]


class RolloutStepError(BaseException):
    """A fault of the setup that must end Miles' rollout step, not one group (see the module docstring):
    a `BaseException`, so Miles' class-based rollout loop, which logs and drops any `Exception`, lets it through."""


@contextlib.contextmanager
def step_errors() -> Iterator[None]:
    """Raise a refused config (`ConfigError`) from inside as `RolloutStepError`, with the same message."""
    try:
        yield
    except ConfigError as error:
        raise RolloutStepError(f"openreward_rl refused this setup, ending the rollout step: {error}") from error


async def generate(args: Any, sample: Any, sampling_params: Mapping[str, Any], evaluation: bool = False) -> Any:
    """Run the episode of `sample.metadata` and return `sample` filled (a list after prefix breaks)."""
    return await _generate(
        args, sample, sampling_params, evaluation, singleton_abort_signal(MILES_LEGACY_ROLLOUT_MODULE)
    )


async def _generate(
    args: Any, sample: Any, sampling_params: Mapping[str, Any], evaluation: bool, abort_signal: Any
) -> Any:
    routing_key, preset_reward = getattr(sample, "routing_key", None), not getattr(args, "group_rm", False)
    with step_errors():
        out = await generate_samples(
            args,
            sample,
            sampling_params,
            evaluation=evaluation,
            routing_key=routing_key,
            preset_reward=preset_reward,
            abort_signal=abort_signal,
        )
    rule = None if evaluation else one_sample_rule(args)
    if rule is not None and isinstance(out, list):
        raise RolloutStepError(
            f"the generate hook made {len(out)} samples of one rollout, which {rule} cannot take (Miles reads each group member as one Sample there)"
        )
    return out


async def reward(args: Any, sample_or_samples: Any, **kwargs: Any) -> Any:
    """The episode's reward for one sample; for a list (fan-out, or the group under `--group-rm`), one
    reward per sample (see `openreward_rl.backends.slime.reward`). Under `--group-rm` Miles'
    `batched_async_rm` sets `.reward` on each member of the group it passes: a member that is itself a
    list (a context policy's fan-out) is refused as `RolloutStepError` before Miles meets it."""
    if getattr(args, "group_rm", False) and isinstance(sample_or_samples, list):
        nested = [position for position, member in enumerate(sample_or_samples) if isinstance(member, list)]
        if nested:
            raise RolloutStepError(
                f"--group-rm: members {nested} of the group are lists of samples (a context policy's fan-out), and Miles' batched_async_rm sets "
                "`.reward` on each member as one Sample; run that environment with context_policy: none, or drop --group-rm"
            )
    with step_errors():
        return await slime_reward(args, sample_or_samples, **kwargs)


@attrs.frozen
class GenerateOutput:
    """What Miles reads back from a new-form generate: `.samples`."""

    samples: Any


async def generate_fn(input: Any) -> GenerateOutput:  # noqa: A002  (Miles detects the form by this name)
    """Miles' new form: `input` has `.args` (or `.state.args`), `.sample`, `.sampling_params`, `.evaluation`."""
    state: Any = getattr(input, "state", None)  # Miles' untyped objects
    args = getattr(input, "args", None) or state.args
    evaluation = bool(getattr(input, "evaluation", False))
    return GenerateOutput(
        samples=await _generate(args, input.sample, input.sampling_params, evaluation, state_abort_signal(state))
    )
