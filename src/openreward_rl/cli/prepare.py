"""`openreward-rl prepare`: the tasks of every configured environment and split, as Slime/Miles JSONL.

    openreward-rl prepare --config train_config.yaml --output tasks.jsonl [--max-tasks N] [--seed 42]
        [--difficulty [--difficulty-model NAME] [--difficulty-stage rl] [--difficulty-min-params N]
         [--difficulty-max-params N] [--min-rollouts 4] [--max-response-chars N]]

Each line is `{"prompt", "label", "metadata"}` (`openreward_rl.env.tasks.task_row`); train with
`--input-key prompt --label-key label --metadata-key metadata`. The order and the per-split
selection (`num_samples`, else `--max-tasks`) depend only on the seed. Environments with a
`base_url` (or the config's `env_base_url`) are listed from that server, e.g. a local one.

Before listing, `preflight.check_environments` checks every environment: a server that cannot be
reached, one that does not serve the configured name or variant, or a missing split is one line
and exit code 2, in about a second.

`--difficulty` reads each split's logged-rollout statistics (`get_task_difficulty`, with the model and
stage filters given) and drops tasks whose rollouts all scored the same or whose median response is too
long, before the cap (`openreward_rl.env.difficulty`); kept rows carry their statistics in
`metadata["difficulty"]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path
from typing import Any

import openreward_rl._compat as _compat
from openreward_rl.config import ConfigError, TrainConfig, load_config
from openreward_rl.env.difficulty import TRAINING_STAGES, DifficultyQuery, DifficultyRule, DifficultySelection
from openreward_rl.env.tasks import LISTING_RETRY, list_tasks, task_row
from openreward_rl.preflight import PREFLIGHT_RETRY, check_environments, check_ready
from openreward_rl.redaction import install_log_redaction
from openreward_rl.retry import RetryPolicy

__all__ = ["add_arguments", "run", "prepare"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        default=None,
        help="train_config.yaml (default $OPENREWARD_RL_CONFIG, $TRAIN_CONFIG, ./train_config.yaml)",
    )
    parser.add_argument("--output", required=True, help="the JSONL file to write")
    parser.add_argument(
        "--max-tasks", type=int, default=None, help="cap per split where an environment sets no num_samples"
    )
    parser.add_argument("--seed", type=int, default=42, help="shuffle seed (default 42)")
    parser.add_argument(
        "--difficulty",
        action="store_true",
        help="drop tasks by their logged rollouts (get_task_difficulty): no reward spread, or too long",
    )
    parser.add_argument(
        "--difficulty-model", default=None, help="statistics of rollouts logged under this model name only"
    )
    parser.add_argument(
        "--difficulty-stage",
        choices=TRAINING_STAGES,
        default=None,
        help="statistics of rollouts of this training stage only",
    )
    parser.add_argument(
        "--difficulty-min-params",
        type=int,
        default=None,
        help="statistics of models with at least this many parameters",
    )
    parser.add_argument(
        "--difficulty-max-params", type=int, default=None, help="statistics of models with at most this many parameters"
    )
    parser.add_argument(
        "--min-rollouts",
        type=int,
        default=4,
        help="judge a task only with at least this many logged rollouts (default 4)",
    )
    parser.add_argument(
        "--max-response-chars",
        type=float,
        default=None,
        help="drop tasks whose median logged response is longer (characters)",
    )


async def prepare(
    config: TrainConfig,
    output: Path,
    *,
    max_tasks: int | None,
    seed: int,
    client: Any = None,
    progress: Any = None,
    retry: RetryPolicy = LISTING_RETRY,
    check_retry: RetryPolicy = PREFLIGHT_RETRY,
    selection: DifficultySelection | None = None,
) -> int:
    """Check the environments (`preflight.check_environments` under `check_retry`: `ConfigError` for one
    that is unreachable, not served or lacks a split), list the tasks (a transient failure repeated under
    `retry`; `selection` drops some by difficulty) and write the rows to `output` (atomically). Returns the number of rows."""
    from openreward import AsyncOpenReward

    own_client = client is None
    client = client or AsyncOpenReward()
    try:
        await check_environments(client, config, retry=check_retry)
        refs = await list_tasks(
            client, config, max_tasks=max_tasks, seed=seed, progress=progress, retry=retry, select=selection
        )
    finally:
        if own_client:
            await client.environments.aclose()
    output.parent.mkdir(parents=True, exist_ok=True)
    staging = output.with_name(f".{output.name}.tmp{os.getpid()}")
    with staging.open("w") as handle:
        for ref in refs:
            row = task_row(ref)
            if selection is not None and ref.key in selection.stats:
                row["metadata"]["difficulty"] = selection.stats[ref.key]
            handle.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
    staging.replace(output)
    return len(refs)


def run(args: Any) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    console = Console(stderr=True)
    if args.max_tasks is not None and args.max_tasks < 1:
        console.print(f"openreward-rl prepare: --max-tasks must be at least 1, got {args.max_tasks}")
        return 2
    install_log_redaction()
    _compat.install()  # the SDK fixes and process-wide patches, checked against the installed libraries (`openreward_rl._compat`)
    try:
        config = load_config(args.config)
        check_ready(config)
        selection = _selection(args)
    except ConfigError as error:  # the config, or a difficulty option out of range
        console.print(f"openreward-rl prepare: {error}", markup=False, soft_wrap=True)
        return 2
    splits = sum(len(env.splits) for env in config.environments.values())
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        console=console,
        transient=not console.is_terminal,
    ) as bar:
        listing = bar.add_task("listing tasks", total=splits)

        def advance(environment: str, split: str, count: int) -> None:
            bar.update(listing, advance=1, description=f"{environment}:{split} ({count} tasks)")

        try:
            count = asyncio.run(
                prepare(
                    config,
                    Path(args.output),
                    max_tasks=args.max_tasks,
                    seed=args.seed,
                    progress=advance,
                    selection=selection,
                )
            )
        except ConfigError as error:  # unreachable server, an environment it does not serve, a missing split
            console.print(f"openreward-rl prepare: {error}", markup=False, soft_wrap=True)
            return 2
        except Exception as error:  # SDK / network failures: say which, without a traceback
            console.print(
                f"openreward-rl prepare: listing tasks failed: {type(error).__name__}: {error}",
                markup=False,
                soft_wrap=True,
            )
            return 1
    if selection is not None:
        for (environment, split, reason), dropped in sorted(selection.dropped.items()):
            console.print(f"dropped {dropped} tasks of {environment}:{split}: {reason}", markup=False, emoji=False)
    console.print(f"wrote {count} tasks from {len(config.environments)} environment(s) to {args.output}", markup=False)
    return 0


def _selection(args: Any) -> DifficultySelection | None:
    if not getattr(args, "difficulty", False):
        return None
    query = DifficultyQuery(
        args.difficulty_model, args.difficulty_min_params, args.difficulty_max_params, args.difficulty_stage
    )
    return DifficultySelection(
        query=query, rule=DifficultyRule(min_rollouts=args.min_rollouts, max_response_chars=args.max_response_chars)
    )
