"""`openreward-rl`: one command, one subcommand module each (prepare, train, eval, show, ...)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

# The SDK reads its log level when it is imported: keep a locally served environment's per-request
# INFO lines out of the command's output unless the user asks for them.
os.environ.setdefault("OPENREWARD_LOG_LEVEL", "WARNING")

__all__ = ["main"]

# name -> (module, one-line help). Each module defines `add_arguments(parser)` and `run(args) -> int`.
SUBCOMMANDS: dict[str, tuple[str, str]] = {}


def _register(name: str, module: str, help_text: str) -> None:
    SUBCOMMANDS[name] = (module, help_text)


_register("prepare", "openreward_rl.cli.prepare", "write the tasks of the configured environments as JSONL for Slime/Miles")
_register("train", "openreward_rl.cli.train", "launch Slime or Miles training with this library's hooks")
_register("sft", "openreward_rl.cli.sft", "warm start: fine-tune a model on whole episodes (a scripted teacher's or recorded ones) before RL")
_register("eval", "openreward_rl.cli.eval", "run episodes with a model and print a summary per environment")
_register("check-model", "openreward_rl.cli.check_model", "prove the model family token-exact on a tokenizer's own chat template (exit 0: go, 2: refused)")
_register("show", "openreward_rl.cli.show", "render a trajectory dump for a person (terminal or HTML)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="openreward-rl", description="Token-exact multi-turn tool-use RL on OpenReward environments.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        module = importlib.import_module(module_name)
        sub = subparsers.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(sub)
        sub.set_defaults(handler=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "handler", None) is None:
        parser.print_help()
        return 2
    return int(args.handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
