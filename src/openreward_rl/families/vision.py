"""`VisionSpec`: how a vision-language family turns the images in a conversation into tokens.

A VLM's chat template writes one placeholder per image (Qwen-VL: `<|vision_start|><|image_pad|><|vision_end|>`);
the model's processor then repeats the pad token once per vision token the image becomes (its patch grid,
merged). `VisionSpec.expand` does the same on token ids, with the family's real image processor
(transformers' `Qwen2VLImageProcessor` family, built from the model's preprocessor parameters), so the ids
an episode records are exactly the ids the model sees. `one_pad_per_image` gives the one-pad-per-image form SGLang's
`/generate` takes with `image_data` (it expands each pad itself); `train_inputs` gives the processor's
`pixel_values` / `image_grid_thw` a trainer feeds the vision tower (Slime's `multimodal_train_inputs`).

Images travel as data URLs (`data:image/png;base64,...`): in messages as `{"type": "image", "image": url}`
content parts (what the Qwen-VL templates and HF processors read), in `TokenSegment.images`, and in
SGLang's `image_data`.

>>> spec = get_vision("qwen2-vl")
>>> spec.image_token, spec.merge_size
('<|image_pad|>', 2)
>>> one_pad_per_image([1, 9, 9, 9, 2, 9, 9, 3], pad_id=9)
[1, 9, 2, 9, 3]
"""

from __future__ import annotations

import base64
import functools
import io
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from openreward_rl.errors import ModelFamilyError

__all__ = [
    "VisionSpec",
    "VisionError",
    "get_vision",
    "image_part",
    "images_in",
    "image_url",
    "is_image_part",
    "one_pad_per_image",
    "sample_inputs",
    "describe_content",
]


class VisionError(ModelFamilyError):
    """The images of a conversation do not fit its rendered tokens (a count mismatch, an unreadable image)."""


def image_url(data: str, mime_type: str | None) -> str:
    """A data URL for base64 `data` (kept as is when it already is a URL)."""
    if data.startswith(("data:", "http://", "https://")):
        return data
    return f"data:{mime_type or 'image/png'};base64,{data}"


def image_part(url: str) -> dict[str, Any]:
    """The content part a message holds an image as (read by the Qwen-VL templates and HF processors)."""
    return {"type": "image", "image": url}


def is_image_part(part: Any) -> bool:
    return isinstance(part, Mapping) and (
        part.get("type") in ("image", "image_url") or "image" in part or "image_url" in part
    )


def _part_url(part: Mapping[str, Any]) -> str:
    if isinstance(part.get("image"), str):
        return part["image"]
    url = part.get("image_url")
    return url.get("url", "") if isinstance(url, Mapping) else str(url or "")


def images_in(messages: Iterable[Mapping[str, Any]]) -> list[str]:
    """The data URLs of every image part in `messages`, in the order a template writes them."""
    found: list[str] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            found.extend(_part_url(part) for part in content if is_image_part(part))
    return found


def load_image(url: str) -> Any:
    """A PIL image (RGB, as SGLang loads it) from a data URL; VisionError when it cannot be read."""
    from PIL import Image

    try:
        payload = url.split(",", 1)[1] if url.startswith("data:") else url
        image = Image.open(io.BytesIO(base64.b64decode(payload, validate=False)))
        image.load()
    except Exception as error:
        raise VisionError(f"an image the environment sent cannot be read ({type(error).__name__}: {error})") from error
    return image if image.mode == "RGB" else image.convert("RGB")


def one_pad_per_image(ids: Iterable[int], pad_id: int) -> list[int]:
    """Each run of pad tokens as one pad: the form SGLang `/generate` takes with `image_data` (it expands each)."""
    out: list[int] = []
    for token in ids:
        if not (token == pad_id and out and out[-1] == pad_id):
            out.append(int(token))
    return out


@attrs.frozen
class VisionSpec:
    """One VLM family's image tokens and image processor (see the module).

    `processor_class`: a transformers image processor class name (the PIL backend is used where
    torchvision is missing); `processor_kwargs`: the model's `preprocessor_config.json` values.
    `merge_size`: patches merged into one vision token per side. `image_token`: the pad the
    template writes once per image and the processor repeats.
    """

    name: str
    image_token: str
    processor_class: str
    processor_kwargs: Mapping[str, Any] = attrs.field(factory=dict)
    merge_size: int = 2
    source: str = ""

    @functools.cached_property
    def image_processor(self) -> Any:
        import transformers

        cls = getattr(transformers, self.processor_class + "Pil", None) or getattr(transformers, self.processor_class)
        return cls(**dict(self.processor_kwargs))

    def pad_id(self, tokenizer: Any) -> int:
        token_id = tokenizer.convert_tokens_to_ids(self.image_token)
        if not isinstance(token_id, int) or token_id == tokenizer.unk_token_id:
            raise VisionError(f"the {self.name} image token {self.image_token!r} is not one token of this tokenizer")
        return token_id

    def grids(self, images: Sequence[str]) -> list[tuple[int, int, int]]:
        """Each image's (t, h, w) patch grid as the image processor makes it."""
        out = self.image_processor(images=[load_image(url) for url in images], return_tensors="np")
        return [(int(t), int(h), int(w)) for t, h, w in out["image_grid_thw"]]

    def token_counts(self, images: Sequence[str]) -> list[int]:
        """How many pad tokens each image becomes (its grid's patches / merge_size²)."""
        if not images:
            return []
        return [t * h * w // self.merge_size**2 for t, h, w in self.grids(images)]

    def expand(self, ids: Sequence[int], images: Sequence[str], pad_id: int) -> list[int]:
        """`ids` with the i-th pad token (one per image, as the template writes it) repeated as the
        processor repeats it for `images[i]`. VisionError when pads and images differ in number."""
        pads = sum(1 for token in ids if token == pad_id)
        if pads != len(images):
            raise VisionError(
                f"the rendered tokens hold {pads} {self.image_token} placeholder(s) for {len(images)} image(s); "
                "an environment's text may contain the placeholder itself"
            )
        if not images:
            return list(ids)
        counts = iter(self.token_counts(images))
        expanded: list[int] = []
        for token in ids:
            expanded.extend([pad_id] * next(counts) if token == pad_id else [token])
        return expanded

    def train_inputs(self, images: Sequence[str]) -> dict[str, Any]:
        """The processor's vision tensors for `images` (`pixel_values`, `image_grid_thw`; torch), as Slime's
        `multimodal_train_inputs` holds them."""
        out = self.image_processor(images=[load_image(url) for url in images], return_tensors="pt")
        return {key: out[key] for key in ("pixel_values", "image_grid_thw")}


# Qwen2-VL and Qwen2.5-VL: the values of their preprocessor_config.json (patch 14, merged 2x2, 2 frames;
# 4..16384 merged patches of 28x28 pixels; CLIP mean/std, the class defaults)
QWEN2_VL = VisionSpec(
    name="qwen2-vl",
    image_token="<|image_pad|>",
    processor_class="Qwen2VLImageProcessor",
    processor_kwargs={
        "patch_size": 14,
        "merge_size": 2,
        "temporal_patch_size": 2,
        "size": {"shortest_edge": 3136, "longest_edge": 12845056},
    },
    source="transformers Qwen2VLImageProcessor with Qwen2.5-VL's preprocessor_config values",
)
# Qwen3-VL: patch 16, mean/std 0.5 (its preprocessor_config.json)
QWEN3_VL = VisionSpec(
    name="qwen3-vl",
    image_token="<|image_pad|>",
    processor_class="Qwen2VLImageProcessor",
    processor_kwargs={
        "patch_size": 16,
        "merge_size": 2,
        "temporal_patch_size": 2,
        "size": {"shortest_edge": 65536, "longest_edge": 16777216},
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
    },
    source="transformers Qwen2VLImageProcessor with Qwen3-VL's preprocessor_config values",
)
_SPECS = {spec.name: spec for spec in (QWEN2_VL, QWEN3_VL)}


def get_vision(name: str) -> VisionSpec:
    """The vision spec called `name` (recorded on token segments); VisionError naming the known ones."""
    try:
        return _SPECS[name]
    except KeyError:
        raise VisionError(f"unknown vision spec {name!r}; known: {sorted(_SPECS)}") from None


def sample_inputs(images: Sequence[str], vision: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(`multimodal_inputs`, `multimodal_train_inputs`) of a Slime/Miles `Sample` for a segment's images: the
    PIL images, and the processor's `pixel_values` / `image_grid_thw` the trainer feeds the vision tower."""
    spec = get_vision(vision)
    return {"images": [load_image(url) for url in images]}, spec.train_inputs(images)


def describe_content(content: Any) -> str:
    """A message's content as text for people: text parts as they are, each image as `[image <mime type>, <n> kB]`
    (never its base64).

    >>> describe_content([{"type": "text", "text": "a chart:"}, image_part("data:image/png;base64," + "A" * 2048)])
    'a chart:\\n[image image/png, 1.5 kB]'
    """
    if isinstance(content, str) or content is None:
        return content or ""
    lines = []
    for part in content if isinstance(content, list) else [content]:
        if is_image_part(part):
            url = _part_url(part)
            mime = url[5 : url.index(";")] if url.startswith("data:") and ";" in url else "image"
            lines.append(f"[image {mime}, {len(url.split(',', 1)[-1]) * 3 / 4 / 1024:.1f} kB]")
        elif isinstance(part, Mapping):
            lines.append(str(part.get("text", "")))
    return "\n".join(lines)
