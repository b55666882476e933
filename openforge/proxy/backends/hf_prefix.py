"""Prompt-prefix reuse for the transformers back-end: the keys and values of token sequences it has
already run, so a prompt that starts with one of them prefills only its new tokens.

Owns: :class:`PrefixCache` — finished rows' keys/values (prompt + generated tokens, per layer), the
lookup of the longest cached prefix of a new prompt, a byte budget with least-recently-used eviction, and
invalidation when the weights change.

Why: an agent re-sends its whole history every turn, and rollouts through one harness open with the same
system prompt and tool list (425 tokens for react with SmolLM2's template). Measured on the main job's
held-out point: 94 % of the prompt tokens its 50 calls sent were a prefix of an earlier call's tokens;
on 2 CPU cores prefill runs at ~250 tokens/s, so re-prefilling them was most of that phase's time.

Exactness: a cached key/value was computed by the same weights over the same tokens at the same
positions (in another batch, so equal up to float rounding, like any batched row); only tokens the
model has run are cached, and the new prompt's last token is always run afresh (its logits start the
generation). The weights' identity and in-place version counters are checked before every lookup: an
optimizer step, a ``load_state_dict`` or a swapped parameter empties the cache, so no call is ever served
keys/values from other weights.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

__all__ = ["MIN_PREFIX", "PrefixCache", "weights_version"]

#: A shorter shared prefix is not worth a separate prefill for.
MIN_PREFIX = 32

KV = list[tuple[Any, Any]]  # per layer: (keys, values), each [1, kv_heads, tokens, head_dim]


def weights_version(model: Any) -> tuple[int, ...]:
    """Identity and in-place version of every parameter and buffer: changes with any update to the weights
    (an optimizer step, ``load_state_dict``, a replaced tensor)."""
    out: list[int] = []
    for t in (*model.parameters(), *model.buffers()):
        out += (id(t), t._version)
    return tuple(out)


def _common(a: tuple[int, ...], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class PrefixCache:
    """Keys/values of sequences the model ran, up to ``max_bytes`` (least recently used go first)."""

    def __init__(self, model: Any, max_bytes: int):
        self.model = model
        self.max_bytes = int(max_bytes)
        self._entries: OrderedDict[tuple[int, ...], KV] = OrderedDict()
        self._bytes = 0
        self._version: tuple[int, ...] | None = None
        self.hits = 0  # prompt tokens served from the cache (observability, tests)
        self.misses = 0  # prompt tokens prefilled

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0

    def check_weights(self) -> bool:
        """Empty the cache if the weights changed since it was filled; returns whether they had."""
        v = weights_version(self.model)
        if v == self._version:
            return False
        self.clear()
        self._version = v
        return True

    def lookup(self, prompt: list[int]) -> tuple[int, KV | None]:
        """The longest cached prefix of ``prompt`` that leaves its last token to run: ``(n, kv)`` with the
        keys/values of ``prompt[:n]``, or ``(0, None)`` when none reaches :data:`MIN_PREFIX`."""
        self.check_weights()
        best, key = 0, None
        for ids in self._entries:
            n = min(_common(ids, prompt), len(prompt) - 1)
            if n > best:
                best, key = n, ids
        if key is None or best < MIN_PREFIX:
            self.misses += len(prompt)
            return 0, None
        self._entries.move_to_end(key)
        self.hits += best
        self.misses += len(prompt) - best
        return best, [(k[:, :, :best], v[:, :, :best]) for k, v in self._entries[key]]

    def store(self, ids: list[int], kv: KV) -> None:
        """Keep ``kv`` (per layer ``[1, heads, len(ids), dim]``, not shared with a running batch) for ``ids``;
        a sequence that is a prefix of a cached one adds nothing, and cached prefixes of it are replaced.
        Nothing is stored when the weights changed since the last lookup (``kv`` may be the old weights')."""
        if len(ids) < MIN_PREFIX or self.max_bytes <= 0:
            return
        if self.check_weights():
            return
        key = tuple(ids)
        for old in list(self._entries):
            if len(old) >= len(key) and old[:len(key)] == key:
                self._entries.move_to_end(old)
                return
            if len(old) < len(key) and key[:len(old)] == old:
                self._drop(old)
        size = sum(k.nbytes + v.nbytes for k, v in kv)
        if size > self.max_bytes:
            return
        self._entries[key] = kv
        self._bytes += size
        while self._bytes > self.max_bytes:
            self._drop(next(iter(self._entries)))

    def _drop(self, key: tuple[int, ...]) -> None:
        kv = self._entries.pop(key)
        self._bytes -= sum(k.nbytes + v.nbytes for k, v in kv)
