"""`openreward-rl prepare`: the tasks of every configured environment and split, as Slime/Miles JSONL.

    openreward-rl prepare --config train_config.yaml --output tasks.jsonl [--max-tasks N] [--seed 42]

Each line is `{"prompt", "label", "metadata"}` (`openreward_rl.env.tasks.task_row`); train with
`--input-key prompt --label-key label --metadata-key metadata`. The order and the per-split
selection (`num_samples`, else `--max-tasks`) depend only on the seed. Environments with a
`base_url` (or the config's `env_base_url`) are listed from that server, e.g. a local one.

Before listing, `preflight.check_environments` checks every environment: a server that cannot be
reached, one that does not serve the configured name or variant, or a missing split is one line
and exit code 2, in about a second.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path
from typing import Any

from openreward_rl.config import ConfigError, TrainConfig, load_config
from openreward_rl.preflight import PREFLIGHT_RETRY, check_environments, check_ready
from openreward_rl.redaction import install_log_redaction
from openreward_rl.env.tasks import list_tasks, task_row
from openreward_rl.retry import RetryPolicy
from openreward_rl.env.tasks import LISTING_RETRY, list_tasks, task_row

__all__ = ["add_arguments", "run", "prepare"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=None, help="train_config.yaml (default $OPENREWARD_RL_CONFIG, $TRAIN_CONFIG, ./train_config.yaml)")
    parser.add_argument("--output", required=True, help="the JSONL file to write")
    parser.add_argument("--max-tasks", type=int, default=None, help="cap per split where an environment sets no num_samples")
    parser.add_argument("--seed", type=int, default=42, help="shuffle seed (default 42)")


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
) -> int:
    """Check the environments (`preflight.check_environments` under `check_retry`: `ConfigError` for one
    that is unreachable, not served or lacks a split), list the tasks (a transient failure repeated under
    `retry`) and write the rows to `output` (atomically). Returns the number of rows."""
    from openreward import AsyncOpenReward

    own_client = client is None
    client = client or AsyncOpenReward()
    try:
        await check_environments(client, config, retry=check_retry)
        refs = await list_tasks(client, config, max_tasks=max_tasks, seed=seed, progress=progress, retry=retry)
    finally:
        if own_client:
            await client.environments.aclose()
    output.parent.mkdir(parents=True, exist_ok=True)
    staging = output.with_name(f".{output.name}.tmp{os.getpid()}")
    with staging.open("w") as handle:
        for ref in refs:
            handle.write(json.dumps(task_row(ref), ensure_ascii=False, sort_keys=True) + "\n")
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
    try:
        config = load_config(args.config)
        check_ready(config)
    except ConfigError as error:
        console.print(f"openreward-rl prepare: {error}", markup=False, soft_wrap=True)
        return 2
    splits = sum(len(env.splits) for env in config.environments.values())
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), console=console, transient=not console.is_terminal) as bar:
        listing = bar.add_task("listing tasks", total=splits)

        def advance(environment: str, split: str, count: int) -> None:
            bar.update(listing, advance=1, description=f"{environment}:{split} ({count} tasks)")

        try:
            count = asyncio.run(prepare(config, Path(args.output), max_tasks=args.max_tasks, seed=args.seed, progress=advance))
        except ConfigError as error:  # unreachable server, an environment it does not serve, a missing split
            console.print(f"openreward-rl prepare: {error}", markup=False, soft_wrap=True)
            return 2
        except Exception as error:  # SDK / network failures: say which, without a traceback
            console.print(f"openreward-rl prepare: listing tasks failed: {type(error).__name__}: {error}", markup=False, soft_wrap=True)
            return 1
    console.print(f"wrote {count} tasks from {len(config.environments)} environment(s) to {args.output}", markup=False)
    return 0
