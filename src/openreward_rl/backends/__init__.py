"""Hooks that plug this library into RL trainers.

| Trainer | Flag | Path |
|---|---|---|
| Slime | `--custom-generate-function-path` | `openreward_rl.backends.slime.generate` |
| Slime | `--custom-rm-path` | `openreward_rl.backends.slime.reward` |
| Miles | `--custom-generate-function-path` | `openreward_rl.backends.miles.generate` |
| Miles | `--custom-rm-path` | `openreward_rl.backends.miles.reward` |
| Miles (agentic) | `--custom-generate-function-path` | `openreward_rl.backends.miles_agent.generate` |
| Miles (agentic) | `--custom-agent-function-path` | `openreward_rl.backends.miles_agent.run` |
| both | `--dynamic-sampling-filter-path` | `openreward_rl.backends.filters.keep_informative_groups` |
| Slime | `--custom-reward-post-process-path` | `openreward_rl.backends.advantages.slime_episode_post_process` (GRPO groups right under forks) |
| TRL | `GRPOTrainer(rollout_func=..., reward_funcs=[...])` | `openreward_rl.backends.trl.TrlAdapter` and its `trained_reward` (`TrlSession` assembles a run) |
| Slime (advantage `turn`/`mix`) | `--custom-reward-post-process-path` | `openreward_rl.backends.advantages.slime_reward_post_process` |
| Slime (advantage `turn`/`mix`) | `--custom-advantage-function-path` | `openreward_rl.backends.advantages.slime_advantages` |
| Miles (advantage `turn`/`mix`) | `--custom-reward-post-process-path` | `openreward_rl.backends.advantages.miles_reward_post_process` (with `--use-opd --opd-type sglang --opd-kl-coef 1.0`) |

Importing this package imports neither Slime, Miles nor TRL: the hooks read the trainer's `Sample`
through its attributes and detect optional fields at run time.

This package holds only trainer glue: the modules above are the hook faces; `_sample/` is the private
plumbing the Slime and Miles hooks share (one generate path per rollout mode, the `Sample` fill, the
per-process state); `trl/` is the TRL glue, public through its `__init__`. Code that knows no trainer
(worker processes, resumable episodes) lives in `openreward_rl.loop`.

Deprecated, for one release: `openreward_rl.backends.fork_normalization.post_process_rewards` (now
`advantages.slime_episode_post_process`).
"""
