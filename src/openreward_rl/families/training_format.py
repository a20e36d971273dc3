"""Stated training formats: where a model's official chat template cannot hold a multi-turn tool episode.

Some official templates cannot represent a multi-turn tool conversation append-only: DeepSeek-V3's and
R1's write the tool-call opener only for the first call turn of a conversation, Phi-4-mini's writes no
tool call at all. For those models the library states a **training format** (as Mistral's family does,
`families/mistral.py`, and as `renderers` and tinker-cookbook do for theirs): sampled turns kept
verbatim, new messages appended the way the format writes them. Where the format departs from the
official template it is **opt-in**: the model's own family keeps the official template and its start-up
check (`families.probe`) refuses a template it cannot follow, naming the format's family to choose
instead; the format's family (`model_family: <name>-format`) renders with the format itself (an
`encoder_factory`, as DeepSeek-V3.2's official encoder is one), and its start-up check names the
departure: the official family's verdict on the same tokenizer (`families.probe`).

>>> opt_in_hint("deepseek-v3")
'the stated training format deepseek-v3-format runs it (opt in: model_family: deepseek-v3-format, or --family deepseek-v3-format; docs/families.md says where it departs from the official template)'
>>> opt_in_hint("qwen3")
''
"""

from __future__ import annotations

__all__ = ["FORMAT_OF", "official_family", "opt_in_hint"]

# a family that renders with the official template -> the family of its stated training format (opt-in)
FORMAT_OF = {"deepseek-v3": "deepseek-v3-format", "phi-4-mini": "phi-4-mini-format"}


def opt_in_hint(family_name: str) -> str:
    """What to tell a user whose official template the family cannot follow: the format that runs it ("" where none)."""
    target = FORMAT_OF.get(family_name)
    if target is None:
        return ""
    return (
        f"the stated training format {target} runs it (opt in: model_family: {target}, or --family {target}; "
        "docs/families.md says where it departs from the official template)"
    )


def official_family(format_family: str) -> str | None:
    """The family that renders with the official template, of the training format `format_family` (None where it is none).

    >>> official_family("deepseek-v3-format"), official_family("qwen3")
    ('deepseek-v3', None)
    """
    return next((name for name, target in FORMAT_OF.items() if target == format_family), None)
