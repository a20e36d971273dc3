"""Tasks of the configured environments, and the JSONL rows Slime and Miles read them from."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from typing import Any

import aiohttp

from openreward_rl.config import TrainConfig
from openreward_rl.environment import TaskRef, task_hash
from openreward_rl.retry import RetryPolicy, call_with_retries

# Listing is repeated on transient errors (busy answers, the SDK giving up its own retries): 1 + 2 + 4 s of back-off.
LISTING_RETRY = RetryPolicy(attempts=4, initial_s=1.0, max_s=10.0)

__all__ = ["list_tasks", "task_row", "task_from_metadata", "task_hash", "LISTING_RETRY"]


async def _tasks_of_split(
    environment: Any, name: str, split: str, cap: int | None, rng: random.Random, base_url: str | None, variant: str | None, retry: RetryPolicy
) -> list[TaskRef]:
    """All tasks of one split through the list API, or through the index API where listing is unsupported."""
    listing = f"listing the tasks of {name}:{split}"
    try:
        tasks = await call_with_retries(lambda: environment.list_tasks(split), retry, what=listing)
    except aiohttp.ClientResponseError as error:
        if error.status not in (404, 405, 501):
            raise
        count = await call_with_retries(lambda: environment.num_tasks(split), retry, what=listing)
        indices = list(range(count))
        rng.shuffle(indices)
        return [TaskRef(name, split, index=i, base_url=base_url, variant=variant) for i in indices[: cap or count]]
    refs = [
        TaskRef(
            name,
            split,
            index=i,
            task_spec=task.task_spec,
            base_url=base_url,
            variant=variant,
            server_name=task.server_name,
            environment_name=task.environment_name,
            namespace=task.namespace,
        )
        for i, task in enumerate(tasks)
    ]
    rng.shuffle(refs)
    return refs[: cap or len(refs)]


async def list_tasks(
    client: Any, config: TrainConfig, *, max_tasks: int | None = None, seed: int = 0, progress: Any = None, retry: RetryPolicy = LISTING_RETRY
) -> list[TaskRef]:
    """Tasks of every configured environment and split, shuffled deterministically by `seed`.

    The cap per split is the environment's `num_samples`, else `max_tasks` (the cookbook's rule).
    `progress`, if given, is called with each (environment, split, count) as it is listed. `retry`
    repeats a listing that failed transiently.
    """
    rng = random.Random(seed)
    refs: list[TaskRef] = []
    for name, env_config in config.environments.items():
        base_url = config.base_url_for(name)
        environment = client.environments.get(name, variant=env_config.variant, base_url=base_url)
        for split in env_config.splits:
            split_refs = await _tasks_of_split(environment, name, split, env_config.num_samples or max_tasks, rng, base_url, env_config.variant, retry)
            refs.extend(split_refs)
            if progress is not None:
                progress(name, split, len(split_refs))
    return refs


def task_row(task: TaskRef) -> dict[str, Any]:
    """The JSONL row for Slime/Miles (`--input-key prompt --label-key label --metadata-key metadata`).

    `metadata` is a dict (Slime calls `.get()` on it); `prompt` is a readable placeholder because the
    generate hook builds the real prompt from the environment.
    """
    identity = task.identity
    metadata = {
        "environment": task.environment,
        "split": task.split,
        "index": task.index,
        "task_spec": task.task_spec,
        "variant": task.variant,
        "base_url": task.base_url,
        "server_name": task.server_name,
        "environment_name": task.environment_name,
        "namespace": task.namespace,
        "task_hash": identity if task.task_spec is not None else None,
    }
    return {"prompt": f"[{task.environment}:{task.split}:{identity}]", "label": "", "metadata": metadata}


def task_from_metadata(metadata: Mapping[str, Any] | str) -> TaskRef:
    """The task a row's metadata names (a dict, or a JSON string as older cookbook rows stored it)."""
    if isinstance(metadata, str):
        metadata = json.loads(metadata)
    if not isinstance(metadata, Mapping):
        raise ValueError(f"task metadata must be a mapping, got {type(metadata).__name__}")
    environment = metadata.get("environment") or metadata.get("env_name")
    if not environment or "split" not in metadata:
        raise ValueError("task metadata needs 'environment' and 'split' (rows written by `openreward-rl prepare`)")
    return TaskRef(
        environment=environment,
        split=metadata["split"],
        index=metadata.get("index"),
        task_spec=metadata.get("task_spec"),
        variant=metadata.get("variant"),
        base_url=metadata.get("base_url"),
        server_name=metadata.get("server_name"),
        environment_name=metadata.get("environment_name"),
        namespace=metadata.get("namespace"),
    )
