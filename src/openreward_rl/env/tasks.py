"""Tasks: the tasks of the configured environments (each a `TaskRef`, the one task identity, defined in
`openreward_rl.task`), the SDK's `Task` for one, and the JSONL rows Slime and Miles read them from."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from typing import Any

import aiohttp
import attrs

from openreward_rl.config import TrainConfig
from openreward_rl.env.traffic import use_pooled_transport
from openreward_rl.errors import ConfigError
from openreward_rl.retry import RetryPolicy, call_with_retries
from openreward_rl.task import TaskRef, task_hash

# Listing is repeated on transient errors (busy answers, the SDK giving up its own retries): 1 + 2 + 4 s of back-off.
LISTING_RETRY = RetryPolicy(attempts=4, initial_s=1.0, max_s=10.0)

__all__ = [
    "TaskRef",
    "task_hash",
    "sdk_task",
    "list_tasks",
    "resolve_task",
    "task_row",
    "task_from_metadata",
    "LISTING_RETRY",
    "NO_LISTING_STATUSES",
]


def sdk_task(task: TaskRef) -> Any:
    """The SDK's `Task` for a task named by its spec; None for one named by index."""
    if task.task_spec is None:
        return None
    from openreward.api.environments.types import Task

    return Task(
        server_name=task.server_name or task.environment.split("/")[-1],
        environment_name=task.environment_name or task.environment.split("/")[-1],
        task_spec=dict(task.task_spec),
        namespace=task.namespace
        if task.namespace is not None
        else (task.environment.split("/")[0] if "/" in task.environment else None),
    )


# Answers to `list_tasks` that mean "this environment does not list its tasks": the SDK server answers 400
# when the environment's `list_tasks` raises (environments that serve tasks only by index, like
# SWE-rebench-V2's), other servers 404, 405 or 501. The index API (`num_tasks`/`get_task`) serves those.
NO_LISTING_STATUSES = frozenset({400, 404, 405, 501})


async def _tasks_of_split(
    environment: Any,
    name: str,
    split: str,
    cap: int | None,
    rng: random.Random,
    base_url: str | None,
    variant: str | None,
    retry: RetryPolicy,
) -> list[TaskRef]:
    """All tasks of one split through the list API, or through the index API where listing is unsupported.

    A listing refused with a `NO_LISTING_STATUSES` answer falls back to `num_tasks`; when that fails too
    (a 400 that meant a bad split, not a missing listing), the index API's error is raised, with the
    listing's as its context."""
    listing = f"listing the tasks of {name}:{split}"
    try:
        tasks = await call_with_retries(lambda: environment.list_tasks(split), retry, what=listing)
    except aiohttp.ClientResponseError as error:
        if error.status not in NO_LISTING_STATUSES:
            raise
        count = await call_with_retries(
            lambda: environment.num_tasks(split), retry, what=f"counting the tasks of {name}:{split} (it lists none)"
        )
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
    client: Any,
    config: TrainConfig,
    *,
    max_tasks: int | None = None,
    seed: int = 0,
    progress: Any = None,
    retry: RetryPolicy = LISTING_RETRY,
    select: Any = None,
) -> list[TaskRef]:
    """Tasks of every configured environment and split, shuffled deterministically by `seed`.

    The cap per split is the environment's `num_samples`, else `max_tasks` (the cookbook's rule).
    `progress`, if given, is called with each (environment, split, count) as it is listed. `retry`
    repeats a listing that failed transiently. `select`, if given, is awaited as
    `select(environment, name, split, refs)` on each split's shuffled tasks before the cap, and returns
    the ones to keep (e.g. `env.difficulty.DifficultySelection`).
    """
    use_pooled_transport(client)  # before the first session: every later episode of `client` uses it too
    rng = random.Random(seed)
    refs: list[TaskRef] = []
    for name, env_config in config.environments.items():
        base_url = config.base_url_for(name)
        environment = client.environments.get(name, variant=env_config.variant, base_url=base_url)
        for split in env_config.splits:
            split_refs = await _tasks_of_split(
                environment,
                name,
                split,
                None if select else env_config.num_samples or max_tasks,
                rng,
                base_url,
                env_config.variant,
                retry,
            )
            if select is not None:
                cap = env_config.num_samples or max_tasks
                split_refs = (await select(environment, name, split, split_refs))[: cap or None]
            refs.extend(split_refs)
            if progress is not None:
                progress(name, split, len(split_refs))
    return refs


def resolve_task(config: TrainConfig, task: TaskRef) -> TaskRef:
    """`task` with the server address and variant the config gives its environment, where the task names none.

    Rows written by `openreward-rl prepare` name no variant; on a multi-environment server a session
    without one lands in the server's first class. `ConfigError` for an unconfigured environment.
    """
    env_config = config.environment(task.environment)
    if task.base_url is None and config.base_url_for(task.environment):
        task = attrs.evolve(task, base_url=config.base_url_for(task.environment))
    if task.variant is None and env_config.variant is not None:
        task = attrs.evolve(task, variant=env_config.variant)
    return task


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
        raise ConfigError(f"task metadata must be a mapping, got {type(metadata).__name__}")
    environment = metadata.get("environment") or metadata.get("env_name")
    if not environment or "split" not in metadata:
        raise ConfigError("task metadata needs 'environment' and 'split' (rows written by `openreward-rl prepare`)")
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
