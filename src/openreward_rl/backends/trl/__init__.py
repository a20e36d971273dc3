"""TRL's `GRPOTrainer` (and `SFTTrainer`) on OpenReward episodes: the public face of the TRL glue.

| Module | What |
|---|---|
| `adapter` | `TrlAdapter`: TRL's `rollout_func` and reward function over this library's episodes |
| `run` | `TrlOptions`, `TrlSession`: one `train --framework trl` run assembled (config, model, tasks, trainer) |
| `credit` | per-token advantages (`turn`, `mix`) put into TRL's loss |
| `ranks` | `Ranks`: the run's processes under `accelerate launch`, each one's share of a step, their gathered episodes |
| `sft` | a warm start on whole episodes with TRL's `SFTTrainer` |

Import from here (`from openreward_rl.backends.trl import TrlAdapter, TrlOptions, TrlSession`); the
modules' other names are private. Importing this package imports neither TRL nor torch.
"""

from openreward_rl.backends.trl.adapter import (
    SAMPLERS,
    Completion,
    TrlAdapter,
    completion_of,
    failures,
    task_dataset,
    task_prompt,
)
from openreward_rl.backends.trl.credit import batch_token_advantages, row_advantages, turn_credit_trainer_class
from openreward_rl.backends.trl.ranks import Ranks
from openreward_rl.backends.trl.run import (
    EvalStats,
    TrlOptions,
    TrlSession,
    check_optimizer,
    eval_stats,
    grpo_config,
    last_checkpoint,
    lora_config,
    quiet_trainer,
    release_optimizer,
    trainable_gguf,
)
from openreward_rl.backends.trl.sft import kept_for_sft, sft_rows, train_sft

__all__ = [
    "SAMPLERS",
    "Completion",
    "TrlAdapter",
    "completion_of",
    "failures",
    "task_dataset",
    "task_prompt",
    "batch_token_advantages",
    "row_advantages",
    "turn_credit_trainer_class",
    "Ranks",
    "EvalStats",
    "TrlOptions",
    "TrlSession",
    "check_optimizer",
    "eval_stats",
    "grpo_config",
    "last_checkpoint",
    "lora_config",
    "quiet_trainer",
    "release_optimizer",
    "trainable_gguf",
    "kept_for_sft",
    "sft_rows",
    "train_sft",
]
