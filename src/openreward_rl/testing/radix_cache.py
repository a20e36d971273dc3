"""The SGLang double's prefix cache: SGLang's `RadixCache` over token ids, least recently used out first.

It mirrors `sglang.srt.mem_cache.radix_cache.RadixCache` (SGLang 0.5.x, page size 1, the default
`--radix-eviction-policy lru`):

- the tree holds token sequences; a node's tokens occupy that many slots of the KV pool whether they
  are locked or not, so the pool's free part is what neither the tree nor the running requests hold;
- `match_prefix` finds the longest cached prefix of a sequence, splitting a node where the match ends
  inside it, and marks the nodes on the way as used now (`last_access_time`);
- `insert` adds a sequence's uncached tail as a new leaf and returns how much of it was cached;
- a running request locks the path to its last node (`inc_lock_ref` / `dec_lock_ref`): locked tokens are
  "protected", the rest "evictable" (SGLang's `evictable_size_` / `protected_size_`);
- `evict(n)` frees at least `n` tokens (or all that is evictable) by deleting unlocked leaves, the one
  used longest ago first; a parent left without children becomes a candidate in turn.

Recency is a counter rather than `time.monotonic()`: the same order, and reproducible.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence

__all__ = ["RadixCache", "RadixNode"]


class RadixNode:
    __slots__ = ("children", "key", "last_access", "lock_ref", "parent")

    def __init__(self, key: tuple[int, ...], parent: RadixNode | None, last_access: int) -> None:
        self.key = key
        self.parent = parent
        self.children: dict[int, RadixNode] = {}
        self.lock_ref = 0
        self.last_access = last_access

    @property
    def attached(self) -> bool:
        """Still in the tree (not evicted)."""
        node: RadixNode | None = self
        while node is not None and node.parent is not None:
            if node.parent.children.get(node.key[0]) is not node:
                return False
            node = node.parent
        return True


def _common_length(key: tuple[int, ...], ids: Sequence[int], start: int) -> int:
    length = min(len(key), len(ids) - start)
    for i in range(length):
        if key[i] != ids[start + i]:
            return i
    return length


class RadixCache:
    """Token sequences sharing their prefixes, with SGLang's lock counts and LRU eviction (module docstring)."""

    def __init__(self) -> None:
        self._clock = itertools.count(1)
        self.root = RadixNode((), None, 0)
        self.root.lock_ref = 1
        self.evictable_size = 0
        self.protected_size = 0

    @property
    def total_size(self) -> int:
        return self.evictable_size + self.protected_size

    def match_prefix(self, ids: Sequence[int]) -> tuple[int, RadixNode]:
        """(tokens of `ids` cached, the node where that prefix ends); touches the nodes on the way."""
        now = next(self._clock)
        node, matched = self.root, 0
        while matched < len(ids) and ids[matched] in node.children:
            child = node.children[ids[matched]]
            child.last_access = now
            common = _common_length(child.key, ids, matched)
            matched += common
            if common < len(child.key):
                return matched, self._split(child, common)
            node = child
        return matched, node

    def touch(self, node: RadixNode) -> None:
        """Mark the path from `node` to the root as used now (a waiting request's prefix, matched again)."""
        now = next(self._clock)
        while node is not self.root:
            node.last_access = now
            node = node.parent  # type: ignore[assignment]

    def insert(self, ids: Sequence[int]) -> tuple[int, RadixNode]:
        """Add `ids`; returns (tokens that were already cached, the node `ids` ends at)."""
        cached, node = self.match_prefix(ids)
        if cached < len(ids):
            leaf = RadixNode(tuple(ids[cached:]), node, next(self._clock))
            node.children[leaf.key[0]] = leaf
            self.evictable_size += len(leaf.key)
            node = leaf
        return cached, node

    def inc_lock_ref(self, node: RadixNode) -> None:
        while node is not self.root:
            if node.lock_ref == 0:
                self.evictable_size -= len(node.key)
                self.protected_size += len(node.key)
            node.lock_ref += 1
            node = node.parent  # type: ignore[assignment]

    def dec_lock_ref(self, node: RadixNode) -> None:
        while node is not self.root:
            if node.lock_ref == 1:
                self.evictable_size += len(node.key)
                self.protected_size -= len(node.key)
            node.lock_ref -= 1
            node = node.parent  # type: ignore[assignment]

    def evict(self, num_tokens: int) -> int:
        """Delete unlocked leaves, least recently used first, until `num_tokens` are freed; returns the tokens freed."""
        order = itertools.count()  # ties: first found first, never comparing nodes
        heap = [(leaf.last_access, next(order), leaf) for leaf in self._evictable_leaves()]
        heapq.heapify(heap)
        freed = 0
        while freed < num_tokens and heap:
            _, _, leaf = heapq.heappop(heap)
            parent = leaf.parent
            assert parent is not None
            del parent.children[leaf.key[0]]
            self.evictable_size -= len(leaf.key)
            freed += len(leaf.key)
            if parent is not self.root and not parent.children and parent.lock_ref == 0:
                heapq.heappush(heap, (parent.last_access, next(order), parent))
        return freed

    def _evictable_leaves(self) -> list[RadixNode]:
        leaves, stack = [], list(self.root.children.values())
        while stack:
            node = stack.pop()
            if node.children:
                stack.extend(node.children.values())
            elif node.lock_ref == 0:
                leaves.append(node)
        return leaves

    def _split(self, child: RadixNode, length: int) -> RadixNode:
        """Cut `child` after `length` tokens; the new upper part takes its place and is returned."""
        parent = child.parent
        assert parent is not None
        upper = RadixNode(child.key[:length], parent, child.last_access)
        upper.lock_ref = child.lock_ref
        child.key = child.key[length:]
        child.parent = upper
        upper.children[child.key[0]] = child
        parent.children[upper.key[0]] = upper
        return upper
