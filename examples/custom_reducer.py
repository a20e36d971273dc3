"""A reward reduction of your own: the best step reward, less a cost for every step after the first.

A `RewardReducer` (openreward_rl.reducers) turns the rewards an episode observed into its one reward:
`reduce(rewards)` gets every step reward in order (plus the environment's `nonterminal_reward`, appended
when the episode did not finish) and returns one number, or None when it got none (no reward observed
is never 0). The result is then clamped to `min_reward` / `max_reward`. `name` names it in logs. It is
built per episode with no arguments, so a cost other than the default is a subclass or a factory.

Use it from a config in either way (docs/training.md, "Your own parts"):

    environments:
      MyEnv:
        reward_reduction: examples/custom_reducer.py:BestMinusSteps    # the class, by file (or package.module:Class)

    plugins: [examples/custom_reducer.py]                              # imported first: registers the name
    environments:
      MyEnv:
        reward_reduction: best_minus_steps

A name that is neither registered nor importable is refused when the config loads (and so by
`--dry-run`), with the registered names listed.

Run it: `python examples/custom_reducer.py`. It loads a config naming the reduction each way and prints
one JSON line per episode: its step rewards and the reward each config's policy gives them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import attrs

from openreward_rl.reducers import register_reducer

HERE = Path(__file__).resolve()


@register_reducer("best_minus_steps")
@attrs.frozen
class BestMinusSteps:
    """max(rewards) - step_cost * (len(rewards) - 1): reach the best reward, in as few steps as possible.

    >>> BestMinusSteps().reduce([0.0, 0.5, 1.0])
    0.8
    >>> BestMinusSteps().reduce([]) is None
    True
    """

    step_cost: float = 0.1
    name = "best_minus_steps"

    def reduce(self, rewards: Sequence[float]) -> float | None:
        if not rewards:
            return None
        return round(max(rewards) - self.step_cost * (len(rewards) - 1), 10)


def main() -> None:
    from openreward_rl.config import parse_config

    by_class = parse_config(
        {"environments": {"MyEnv": {"reward_reduction": f"{HERE}:BestMinusSteps", "min_reward": 0.0}}}
    )
    by_name = parse_config(
        {
            "plugins": [str(HERE)],
            "environments": {"MyEnv": {"reward_reduction": "best_minus_steps", "nonterminal_reward": -0.5}},
        }
    )
    episodes = {
        "one_step": ([1.0], True),
        "three_steps": ([0.0, 0.5, 1.0], True),
        "unfinished": ([0.2, 0.1], False),
        "no_reward": ([], True),
    }
    for label, (rewards, finished) in episodes.items():
        print(
            json.dumps(
                {
                    "episode": label,
                    "step_rewards": rewards,
                    "finished": finished,
                    "by_class": by_class.environment("MyEnv").reward_policy().final_reward(rewards, finished=finished),
                    "by_name": by_name.environment("MyEnv").reward_policy().final_reward(rewards, finished=finished),
                }
            )
        )


if __name__ == "__main__":
    main()
