"""WandB logging of flat metrics, into the process's active run or one of our own.

Slime and Miles initialise wandb in the rollout manager process (`init_tracking(args,
primary=False)` when `--use-wandb`), so the rollout-log hook finds `wandb.run` and logs into it.
`openreward-rl eval` has no run: `WandbLogger` starts one (project/name from its arguments or
`WANDB_PROJECT`/`WANDB_NAME`; `WANDB_MODE=offline` works) with a redacted config.

Each metric family is tied to its step key with `define_metric`, so `openreward/*` curves share
Slime's `rollout/step` axis and eval curves its `eval/step` axis.

>>> redact_config({"lr": 1e-6, "max_tokens": 8, "secrets": {"openai_api_key": "sk-1"}, "wandb_key": "k", "note": "sk-live-123"})
{'lr': 1e-06, 'max_tokens': 8, 'secrets': '<redacted>', 'wandb_key': '<redacted>', 'note': '<redacted>'}
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Mapping
from typing import Any

from openreward_rl.redaction import redact

__all__ = ["WandbLogger", "redact_config", "REDACTED"]

logger = logging.getLogger(__name__)

REDACTED = "<redacted>"
_SECRET_KEY = re.compile(
    r"(secret|passw|api[_-]?key|(^|[_-])key$|(^|[_-])token$|auth|credential|cookie)", re.IGNORECASE
)
_SECRET_VALUE = re.compile(r"^(sk-|sk_|hf_|ghp_|gho_|github_pat_|xox[abp]-|AKIA|AIza)")


def redact_config(config: Any) -> Any:
    """A copy of `config` safe to log: values under secret-looking keys, and values that look like
    API keys, become "<redacted>"; registered secret values (`openreward_rl.redaction`) become "***". Accepts mappings, sequences and objects with `__dict__`
    (an argparse Namespace)."""
    if (
        hasattr(config, "__dict__")
        and not isinstance(config, (str, bytes, int, float, bool, type(None)))
        and not isinstance(config, Mapping)
    ):
        config = vars(config)
    if isinstance(config, Mapping):
        return {
            str(k): REDACTED if _SECRET_KEY.search(str(k)) and v not in (None, "", False) else redact_config(v)
            for k, v in config.items()
        }
    if isinstance(config, (list, tuple)):
        return [redact_config(v) for v in config]
    if isinstance(config, str) and _SECRET_VALUE.match(config):
        return REDACTED
    if isinstance(config, str):
        return redact(config)  # registered secret values, wherever they appear
    if isinstance(config, (int, float, bool, type(None))):
        return config
    return str(config)


class WandbLogger:
    """Logs `dict[str, float]` metrics with a step key.

    Uses `wandb.run` when one is active (it never finishes a run it did not start). Otherwise,
    if `start_run` is True, it starts a run on first use; if False, metrics only go to the log.
    """

    def __init__(
        self,
        *,
        project: str | None = None,
        name: str | None = None,
        group: str | None = None,
        config: Any = None,
        directory: str | os.PathLike[str] | None = None,
        start_run: bool = True,
    ) -> None:
        self.project = project or os.environ.get("WANDB_PROJECT") or "openreward-rl"
        self.name = name or os.environ.get("WANDB_NAME")
        self.group = group
        self.config = redact_config(config) if config is not None else None
        self.directory = directory or os.environ.get("WANDB_DIR")  # read now: wandb caches its settings per process
        self.start_run = start_run
        self._own_run: Any = None
        self._defined: set[tuple[str, str]] = set()

    @property
    def run(self) -> Any:
        """The run metrics go to, or None."""
        import wandb

        if self._own_run is not None:
            return self._own_run
        if wandb.run is not None:
            return wandb.run
        if not self.start_run:
            return None
        self._own_run = wandb.init(
            project=self.project,
            name=self.name,
            group=self.group,
            config=self.config,
            dir=str(self.directory) if self.directory is not None else None,
        )
        return self._own_run

    def log(self, metrics: Mapping[str, float], *, step_key: str | None = None, step: int | None = None) -> None:
        """Log one row. With `step_key`, every metric's top-level family (`openreward/*`) is plotted
        against it and the row carries `step_key: step`. Non-finite values are dropped."""
        if step_key is not None and step is None:
            raise ValueError(f"step_key {step_key!r} needs a step")
        row = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and math.isfinite(v)}
        if not row:
            return
        run = self.run
        if run is None:
            logger.info("metrics (no wandb run): %s", row)
            return
        if step_key is not None and step is not None:
            for family in sorted({k.split("/", 1)[0] for k in row}):
                if (family, step_key) not in self._defined:
                    run.define_metric(step_key)
                    run.define_metric(f"{family}/*", step_metric=step_key)
                    self._defined.add((family, step_key))
            row[step_key] = step
        run.log(row)

    def finish(self) -> None:
        """Finish the run this logger started (if any)."""
        if self._own_run is not None:
            self._own_run.finish()
            self._own_run = None
