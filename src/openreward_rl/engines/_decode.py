"""How a wave's forward passes run (`WaveEngine`): a prefill of the padded prompts, then one step per token.

- `EagerDecoder`: transformers' growing `DynamicCache` and the 2D padding mask (each step's mask a
  view of one mask allocated for the wave), as `model.generate` decodes a batch.
- `StaticDecoder`: a `StaticCache` sized to the wave (rows x (prompt width + steps)) and an explicit 4D
  mask kept in one buffer. With `graphs` (CUDA), the decode step is captured once per wave as a CUDA
  graph and replayed for every later token: for a small model on a GPU each step's cost is the
  forward's Python and kernel launches (~2,000 operations), which a replay pays once per wave.
  It serves models whose every cache layer is a plain `StaticLayer` (no sliding window, no linear
  attention) under `sdpa` attention (`StaticDecoder.serves`); others take `EagerDecoder`.

Both return the last position's logits for every row; rows are never dropped (a finished row rides
along, as in `model.generate`).
"""

from __future__ import annotations

import inspect
from typing import Any

from openreward_rl._compat import transformers as compat_transformers

__all__ = ["EagerDecoder", "StaticDecoder", "forward_keywords"]


def forward_keywords(forward: Any) -> tuple[str, dict[str, Any]]:
    """The name `forward` takes the key/value cache by, and the keywords that keep only the last position's logits."""
    try:
        accepted = set(inspect.signature(forward).parameters)
    except (TypeError, ValueError):
        accepted = set()
    # transformers 5.24 names the cache `cache` (`past_key_values` deprecated); older releases only know the latter
    cache_name = "cache" if "cache" in accepted else "past_key_values"
    return cache_name, {"logits_to_keep": 1} if "logits_to_keep" in accepted else {}


def _last_logits(
    model: Any, keywords: tuple[str, dict[str, Any]], ids: Any, mask: Any, positions: Any, cache: Any
) -> Any:
    cache_name, extra = keywords
    output = model(
        input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, **{cache_name: cache}, **extra
    )
    return output.logits[:, -1]


class EagerDecoder:
    """A wave over a growing `DynamicCache` (see the module docstring)."""

    def __init__(self, model: Any, keywords: tuple[str, dict[str, Any]], mask: Any, steps: int) -> None:
        import torch
        from transformers import DynamicCache

        self.model, self.keywords = model, keywords
        self.width = mask.shape[1]
        self.mask = torch.cat([mask, mask.new_ones((mask.shape[0], steps))], dim=-1)
        self.cache = DynamicCache(config=model.config)

    def prefill(self, ids: Any, positions: Any) -> Any:
        return _last_logits(self.model, self.keywords, ids, self.mask[:, : self.width], positions, self.cache)

    def step(self, index: int, tokens: Any, positions: Any) -> Any:
        """The logits after feeding `tokens` (one per row) at `positions`: the wave's `index`-th sampled token (from 0)."""
        return _last_logits(
            self.model, self.keywords, tokens[:, None], self.mask[:, : self.width + index + 1], positions, self.cache
        )


class StaticDecoder:
    """A wave over a `StaticCache` with an explicit 4D mask, its decode step a replayed CUDA graph with `graphs` (see the
    module docstring). The mask says True where a query may attend."""

    def __init__(
        self, model: Any, keywords: tuple[str, dict[str, Any]], mask: Any, steps: int, *, graphs: bool
    ) -> None:
        import torch
        from transformers import StaticCache

        self.model, self.keywords, self.graphs = model, keywords, graphs
        rows, self.width = mask.shape
        self.length = self.width + steps
        self.cache = StaticCache(config=model.config, max_cache_len=self.length)
        self.attend = torch.zeros((rows, 1, 1, self.length), dtype=torch.bool, device=mask.device)
        self.attend[:, 0, 0, : self.width] = mask.bool()
        self.tokens = torch.zeros((rows, 1), dtype=torch.long, device=mask.device)
        self.positions = torch.zeros((rows, 1), dtype=torch.long, device=mask.device)
        self.graph: Any = None
        self.graph_logits: Any = None

    @staticmethod
    def serves(model: Any) -> bool:
        """Whether this decoder reproduces the model's own attention: sdpa, and every cache layer a plain `StaticLayer`."""
        from transformers import StaticCache
        from transformers.cache_utils import StaticLayer

        if compat_transformers.attention_implementation(model.config) != "sdpa":
            return False
        try:
            cache = StaticCache(config=model.config, max_cache_len=8)
        except (TypeError, ValueError, KeyError, AttributeError):
            return False
        return all(type(layer) is StaticLayer for layer in cache.layers)

    def prefill(self, ids: Any, positions: Any) -> Any:
        import torch

        rows, width = ids.shape
        keys = self.attend[:, :, :, :width]  # rows x 1 x 1 x width: the prompt's real tokens
        causal = torch.ones((width, width), dtype=torch.bool, device=ids.device).tril()
        # a padding position attends to itself, so no query row is all masked (softmax over nothing is NaN)
        own = torch.eye(width, dtype=torch.bool, device=ids.device)
        mask = torch.zeros((rows, 1, width, self.length), dtype=torch.bool, device=ids.device)
        mask[:, :, :, :width] = (causal & keys) | own
        return _last_logits(self.model, self.keywords, ids, mask, positions, self.cache)

    def step(self, index: int, tokens: Any, positions: Any) -> Any:
        """As `EagerDecoder.step`. With graphs: the first step runs eagerly on a side stream (the warm-up a capture
        needs), the second is captured, and every step from the second on is a replay over the same buffers."""
        import torch

        self.attend[:, 0, 0, self.width + index] = True
        self.tokens.copy_(tokens[:, None])
        self.positions.copy_(positions)
        if not self.graphs:
            return self._forward()
        if self.graph is None and index == 0:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                logits = self._forward()
            torch.cuda.current_stream().wait_stream(side)
            return logits.clone()
        if self.graph is None:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self.graph_logits = self._forward()
            self.graph = graph
        self.graph.replay()
        return self.graph_logits

    def _forward(self) -> Any:
        return _last_logits(self.model, self.keywords, self.tokens, self.attend, self.positions, self.cache)
