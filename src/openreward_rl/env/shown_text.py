"""What an environment says, as the model will see it: known secrets masked, images accounted for.

Every piece of environment text an episode puts in front of the model (the prompt, tool
descriptions, tool outputs, tool-call errors) and every tool's metadata passes through one
`ShownText` per session before anything else sees it:

- a registered secret value (`openreward_rl.redaction`: the config's secrets, the known
  credentials) is replaced with ``***``, and a warning names the environment and the tool (never
  the value). The model then sees and samples the masked text, so the records stay token-exact and
  no file a run writes holds the value;
- an image block becomes `IMAGE_PLACEHOLDER` (the models served here read text), counted in
  `images_dropped` and reported once per session with where it came from.

>>> from openreward_rl.redaction import register_secrets
>>> register_secrets(["sk-doctest-shown-0042"])
>>> shown = ShownText("Env")
>>> shown.text("401: key sk-doctest-shown-0042 rejected", "tool 'login'")
'401: key *** rejected'
>>> shown.blocks([{"type": "text", "text": "a chart:"}, {"type": "image", "data": "", "mimeType": "image/png"}], "tool 'plot'")
'a chart:\\n[image omitted: this model reads text only]'
>>> shown.redacted_values, shown.images_dropped
(1, 1)
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from openreward_rl.redaction import MASK, redact

__all__ = ["ShownText", "IMAGE_PLACEHOLDER"]

logger = logging.getLogger(__name__)

IMAGE_PLACEHOLDER = "[image omitted: this model reads text only]"


@attrs.define
class ShownText:
    """One session's environment text on its way to the model (see the module)."""

    environment: str
    redacted_values: int = 0
    images_dropped: int = 0
    _warned: set[str] = attrs.field(factory=set, repr=False)

    def text(self, text: str, where: str) -> str:
        """`text` with every registered secret masked; `where` names its source (e.g. "tool 'login'")."""
        masked = redact(text)
        if masked != text:
            found = masked.count(MASK) - text.count(MASK)
            self.redacted_values += max(found, 1)
            self._warn(
                f"secret:{where}",
                "environment %r: %s showed %d known secret value(s); each was replaced with %s before the model saw it",
                self.environment, where, max(found, 1), MASK,
            )  # fmt: skip
        return masked

    def value(self, value: Any, where: str) -> Any:
        """A JSON value (tool metadata) with every registered secret masked, counted as `text` counts."""
        masked = redact(value)
        if masked != value:
            self.redacted_values += 1
            self._warn(f"secret:{where}", "environment %r: %s metadata held a known secret value; it was replaced with %s", self.environment, where, MASK)
        return masked

    def blocks(self, blocks: Iterable[Any], where: str) -> str:
        """The text of SDK blocks (objects or dicts); each image becomes `IMAGE_PLACEHOLDER`."""
        parts = []
        for block in blocks or ():
            text = block.get("text") if isinstance(block, Mapping) else getattr(block, "text", None)
            parts.append(self._image(where) if text is None else str(text))
        return self.text("\n".join(parts), where)

    def content(self, content: Any, where: str) -> str:
        """A chat message's content (a string, or OpenAI content parts) as text; image parts become `IMAGE_PLACEHOLDER`."""
        if content is None:
            return ""
        if isinstance(content, list):
            parts = [part for part in content if isinstance(part, Mapping)]
            return self.text("\n".join(str(p["text"]) if "text" in p else self._image(where) for p in parts), where)
        return self.text(str(content), where)

    def _image(self, where: str) -> str:
        self.images_dropped += 1
        self._warn(
            "image",
            "environment %r: %s holds an image, and this model reads text only; it sees %r in its place "
            "(counted in the episode's images_dropped metric)",
            self.environment, where, IMAGE_PLACEHOLDER,
        )  # fmt: skip
        return IMAGE_PLACEHOLDER

    def _warn(self, key: str, message: str, *args: Any) -> None:
        if key not in self._warned:  # once per session and source: a careless environment repeats itself every call
            self._warned.add(key)
            logger.warning(message, *args)
