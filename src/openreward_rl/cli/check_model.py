"""`openreward-rl check-model --model M [--tokenizer T] [--family F] [--config C] [--thinking on|off|both]`.

Proves, on this tokenizer and its own chat template, that the model's family renders episodes token
for token (`openreward_rl.families.probe`): the check `eval` and the training hooks run before the
first episode, shown on one screen. Exit 0: token-exact (go); 2: not (the first differing token and
how to override), or a family that is unknown or refused. Works offline on every tokenizer `assets`
can load (`--model offline:qwen3`), and on a renamed fine-tune (`--model myorg/agent-7b --tokenizer
offline:qwen3`: the chat template then decides the family).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from typing import Any

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model", required=True, help="the model: a hub name, a local path or offline:NAME (its name picks the family)"
    )
    parser.add_argument("--tokenizer", default=None, help="load the tokenizer from here instead of --model")
    parser.add_argument(
        "--family",
        default=None,
        help="the model family to prove (docs/families.md); default: from --model, then the chat template",
    )
    parser.add_argument(
        "--config", default=None, help="a train_config.yaml: its model_family, thinking and chat_template_kwargs"
    )
    parser.add_argument(
        "--thinking",
        choices=("on", "off", "both"),
        default=None,
        help="enable_thinking for the probe (default: the config's; without --config both)",
    )


def _fail(message: str) -> int:
    print(f"openreward-rl check-model: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    from openreward_rl.assets import load_tokenizer
    from openreward_rl.config import GENERIC_FAMILY, ConfigError, load_config, parse_config
    from openreward_rl.errors import ModelFamilyError
    from openreward_rl.families import ModelFamily, find_family, get_family
    from openreward_rl.families.probe import probe_family

    try:
        config = load_config(args.config) if args.config else parse_config({"environments": {"check-model": {}}})
    except (ConfigError, OSError) as error:
        return _fail(str(error))
    source = args.tokenizer or args.model
    try:
        tokenizer = load_tokenizer(source)
    except Exception as error:
        return _fail(
            f"cannot load the tokenizer {source!r} ({type(error).__name__}: {error}); pass --tokenizer (a hub name, a local path or offline:qwen3)"
        )
    template = getattr(tokenizer, "chat_template", None)
    digest = hashlib.sha256(
        (template if isinstance(template, str) else json.dumps(template, default=str)).encode()
    ).hexdigest()[:12]
    print(f"model      {args.model}")
    print(f"tokenizer  {source} ({len(tokenizer)} tokens, chat template sha256 {digest}…)")
    chosen = args.family or config.model_family
    family: ModelFamily | None
    try:
        if chosen == GENERIC_FAMILY:
            print("family     generic: the template-derived bridge with no family; nothing to prove")
            return 0
        if chosen:
            family, how = get_family(chosen), "given"
        elif (family := find_family(args.model)) is not None:
            how = "by the model name"
        elif (family := find_family(tokenizer)) is not None:
            how = "by the chat template's markers"
        else:
            raise ModelFamilyError(
                f"no family knows {args.model!r} by name, nor its chat template by markers: eval and the hooks would run it "
                "with the template-derived bridge (generic, unchecked); pass --family to check a family on it (docs/families.md)"
            )
    except ModelFamilyError as error:
        return _fail(str(error))
    stops = " / ".join(" ".join(s) or "eos" for s in (family.tool_turn_stops, family.final_turn_stops))
    print(
        f"family     {family.name} ({how}); parser {family.parser}; stops {stops}; parallel calls: {'yes' if family.parallel_calls else 'no'}"
    )
    print(
        f"proof      {'tests here: ' + family.template_source if family.proven_here else 'none in this repository: this check is the proof'}"
    )
    print(f"tools      {_tools_shown(family, tokenizer)}")
    exact = True
    for label, kwargs in _settings(args, config):
        verdict = probe_family(tokenizer, family, kwargs)
        exact = exact and verdict.exact
        print(f"{label:<13}{verdict.summary()}")
    if exact:
        print("verdict    go: token-exact on this tokenizer")
        return 0
    from openreward_rl.families.probe import OVERRIDE
    from openreward_rl.families.training_format import opt_in_hint

    hint = opt_in_hint(family.name)
    print(f"verdict    refused: not token-exact on this tokenizer\n{hint + chr(10) if hint else ''}{OVERRIDE}")
    return 2


def _tools_shown(family: Any, tokenizer: Any) -> str:
    """How the first prompt shows the environment's tools: the template writes them, the family's preamble does, or nothing does."""
    renderer = family.renderer(tokenizer)
    if renderer.renders_tools:
        return "the chat template writes them"
    if family.tool_preamble is not None:
        return f"the {family.name} family's tool preamble ({family.parser} calls): the chat template drops them"
    return "NOT SHOWN: the chat template drops them and the family has no tool preamble; put {tools} in system_prompt_template"


def _settings(args: argparse.Namespace, config: Any) -> list[tuple[str, dict[str, Any]]]:
    extra = dict(config.chat_template_kwargs)
    choice = args.thinking or ("on" if config.thinking else "off" if args.config else "both")
    chosen = {"off": [False], "on": [True], "both": [False, True]}[choice]
    return [(f"thinking {'on' if on else 'off'}", {"enable_thinking": on, **extra}) for on in chosen]
