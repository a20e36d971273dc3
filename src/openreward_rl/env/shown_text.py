"""What an environment says, as the model will see it: known secrets masked, images accounted for.

Every piece of environment text an episode puts in front of the model (the prompt, tool
descriptions, tool outputs, tool-call errors) and every tool's metadata passes through one
`ShownText` per session before anything else sees it:

- a registered secret value (`openreward_rl.redaction`: the config's secrets, the known
  credentials) is replaced with ``***``, and a warning names the environment and the tool (never
  the value). The model then sees and samples the masked text, so the records stay token-exact and
  no file a run writes holds the value;
- an image block reaches a vision-language model (`reads_images`, set by the episode from its
  model family) as an image content part (`families.vision.image_part`, a data URL), counted in
  `images_shown`; for a model that reads text only it becomes `IMAGE_PLACEHOLDER`, counted in
  `images_dropped` and reported once per session with where it came from (never silently).

>>> from openreward_rl.redaction import register_secrets
>>> register_secrets(["sk-doctest-shown-0042"])
>>> shown = ShownText("Env")
>>> shown.text("401: key sk-doctest-shown-0042 rejected", "tool 'login'")
'401: key *** rejected'
>>> shown.blocks([{"type": "text", "text": "a chart:"}, {"type": "image", "data": "", "mimeType": "image/png"}], "tool 'plot'")
'a chart:\\n[image omitted: this model reads text only]'
>>> shown.redacted_values, shown.images_dropped
(1, 1)
>>> seeing = ShownText("Env", reads_images=True)
>>> seeing.parts([{"type": "text", "text": "a chart:"}, {"type": "image", "data": "iVBO", "mimeType": "image/png"}], "tool 'plot'")
('a chart:', ({'type': 'text', 'text': 'a chart:'}, {'type': 'image', 'image': 'data:image/png;base64,iVBO'}))
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from openreward_rl.families.vision import image_part, image_url, is_image_part
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
    reads_images: bool = False  # the model sees images (a vision-language family): keep them as content parts
    images_shown: int = 0
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
                self.environment,
                where,
                max(found, 1),
                MASK,
            )
        return masked

    def value(self, value: Any, where: str) -> Any:
        """A JSON value (tool metadata) with every registered secret masked, counted as `text` counts."""
        masked = redact(value)
        if masked != value:
            self.redacted_values += 1
            self._warn(
                f"secret:{where}",
                "environment %r: %s metadata held a known secret value; it was replaced with %s",
                self.environment,
                where,
                MASK,
            )
        return masked

    def blocks(self, blocks: Iterable[Any], where: str) -> str:
        """The text of SDK blocks (objects or dicts); each image becomes `IMAGE_PLACEHOLDER`."""
        parts = []
        for block in blocks or ():
            text = block.get("text") if isinstance(block, Mapping) else getattr(block, "text", None)
            parts.append(self._image(where) if text is None else str(text))
        return self.text("\n".join(parts), where)

    def parts(self, blocks: Iterable[Any], where: str) -> tuple[str, tuple[dict[str, Any], ...] | None]:
        """(the text of SDK blocks, their content parts in order); the parts are None unless the model reads
        images and a block is one (then `blocks` is not asked: no placeholder, nothing dropped)."""
        listed = list(blocks or ())
        if not self.reads_images or all(_block_text(b) is not None for b in listed):
            return self.blocks(listed, where), None
        parts: list[dict[str, Any]] = []
        for block in listed:
            text = _block_text(block)
            if text is None:
                self.images_shown += 1
                parts.append(image_part(image_url(str(_field(block, "data") or ""), _field(block, "mimeType"))))
            else:
                parts.append({"type": "text", "text": self.text(str(text), where)})
        return "\n".join(p["text"] for p in parts if p["type"] == "text"), tuple(parts)

    def content(self, content: Any, where: str) -> Any:
        """A chat message's content (a string, or OpenAI content parts) as text; image parts become `IMAGE_PLACEHOLDER`,
        or, for a model that reads images, stay content parts (text masked, images as `families.vision.image_part`)."""
        if content is None:
            return ""
        if isinstance(content, list) and self.reads_images and any(is_image_part(p) for p in content):
            return [self._kept_part(part, where) for part in content if isinstance(part, Mapping)]
        if isinstance(content, list):
            parts = [part for part in content if isinstance(part, Mapping)]
            return self.text("\n".join(str(p["text"]) if "text" in p else self._image(where) for p in parts), where)
        return self.text(str(content), where)

    def _kept_part(self, part: Mapping[str, Any], where: str) -> dict[str, Any]:
        if not is_image_part(part):
            return {"type": "text", "text": self.text(str(part.get("text", "")), where)}
        self.images_shown += 1
        url = part.get("image_url")
        return image_part(str(url.get("url", "") if isinstance(url, Mapping) else url or part.get("image", "")))

    def _image(self, where: str) -> str:
        self.images_dropped += 1
        self._warn(
            "image",
            "environment %r: %s holds an image, and this model reads text only; it sees %r in its place "
            "(counted in the episode's images_dropped metric)",
            self.environment,
            where,
            IMAGE_PLACEHOLDER,
        )
        return IMAGE_PLACEHOLDER

    def _warn(self, key: str, message: str, *args: Any) -> None:
        if key not in self._warned:  # once per session and source: a careless environment repeats itself every call
            self._warned.add(key)
            logger.warning(message, *args)


def _field(block: Any, name: str) -> Any:
    return block.get(name) if isinstance(block, Mapping) else getattr(block, name, None)


def _block_text(block: Any) -> Any:
    return _field(block, "text")
