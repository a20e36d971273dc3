"""`openreward-rl`: one command, one subcommand module each (prepare, train, eval, show, ...)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

from openreward_rl._compat import argparse as compat_argparse

# The SDK reads its log level when it is imported: keep a locally served environment's per-request
# INFO lines out of the command's output unless the user asks for them.
os.environ.setdefault("OPENREWARD_LOG_LEVEL", "WARNING")

__all__ = ["main"]

# name -> (module, one-line help). Each module defines `add_arguments(parser)` and `run(args) -> int`.
SUBCOMMANDS: dict[str, tuple[str, str]] = {}


def _register(name: str, module: str, help_text: str) -> None:
    SUBCOMMANDS[name] = (module, help_text)


_register(
    "prepare", "openreward_rl.cli.prepare", "write the tasks of the configured environments as JSONL for Slime/Miles"
)
_register(
    "train",
    "openreward_rl.cli.train",
    "GRPO training: with TRL in this process (--framework trl), or a Slime/Miles job with this library's hooks",
)
_register(
    "sft",
    "openreward_rl.cli.sft",
    "warm start: fine-tune a model on whole episodes (a scripted teacher's or recorded ones) before RL",
)
_register("eval", "openreward_rl.cli.eval", "run episodes with a model and print a summary per environment")
_register(
    "check-model",
    "openreward_rl.cli.check_model",
    "prove the model family token-exact on a tokenizer's own chat template (exit 0: go, 2: refused)",
)
_register("show", "openreward_rl.cli.show", "render a trajectory dump for a person (terminal or HTML)")


class _Parser(argparse.ArgumentParser):
    """argparse that reads `-1e-5` as a value (`--lr -1e-5`), as Python 3.13's does; before 3.13 only
    `-1` and `-.5` were numbers, so a negative number in exponent form was taken for an unknown option."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        compat_argparse.read_exponent_negatives(self)


DEBUG_HELP = "on an error, print the traceback too (also OPENREWARD_RL_DEBUG=1)"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="openreward-rl", description="Token-exact multi-turn tool-use RL on OpenReward environments.")
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    common = _Parser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        module = importlib.import_module(module_name)
        sub = subparsers.add_parser(name, help=help_text, description=help_text, parents=[common])
        module.add_arguments(sub)
        sub.set_defaults(handler=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. An error of the library's own that reaches here is one line naming the problem
    (`cli.failures`), the traceback only under --debug; any other is a bug, shown with its traceback; Ctrl-C
    is the line "interrupted" and exit status 130."""
    from openreward_rl.cli.failures import debug_requested, report

    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "handler", None) is None:
        parser.print_help()
        return 2
    try:
        return int(args.handler(args) or 0)
    except (Exception, KeyboardInterrupt) as error:
        return report(f"openreward-rl {args.command}", error, debug=debug_requested(args))


if __name__ == "__main__":
    sys.exit(main())
