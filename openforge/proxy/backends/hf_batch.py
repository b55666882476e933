"""Continuous batching for the transformers back-end: one running decode batch that rows join and leave
between two tokens.

Owns: :class:`RunningBatch` (the batch's tensors — left-padded attention mask, per-row positions, the KV
cache — and its rows) and :class:`LiveRow` (one request being decoded: its sampler, stop ids, budget,
sampled ids and logprobs).

A row that arrives while others decode is prefilled on its own (with any others that arrived with it)
and its KV cache is merged into the running one, both left-padded to the wider of the two and
attention-masked, so each row's logits stay its unpadded logits up to float rounding; a row that
finishes (stop id, ``max_tokens``, cancelled) leaves at once, and its caller is answered then, not when
the batch ends. Only the transformers ``DynamicCache`` of full-attention layers is merged (a sliding-window
cache is refused by :func:`mergeable`). With a :class:`~.hf_prefix.PrefixCache`, a finished row's keys/values
are kept there, and a new row whose prompt starts with a kept sequence prefills only the rest of it.
With a :class:`~.hf_packed.PackedLinears`, every forward runs the model's linears on its packed copy.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...util.heap import trim_heap
from .base import Generation, SamplingParams
from .hf_packed import PackedLinears
from .hf_prefix import KV, PrefixCache

__all__ = ["LiveRow", "RunningBatch", "mergeable"]

Sampler = Callable[[Any, SamplingParams, Any], tuple[int, float]]


@dataclass
class LiveRow:
    """One request in the batch. ``emit`` gets each sampled id; ``cancel`` set stops it at its next token."""

    prompt: list[int]
    params: SamplingParams
    gen: Any  # torch.Generator
    stops: set[int]
    max_new: int
    cancel: threading.Event
    emit: Callable[[int, float], None]
    key: Any = None  # the caller's handle (the back-end's queued row)
    out: list[int] = field(default_factory=list)
    lps: list[float] = field(default_factory=list)
    finish: str = "length"
    done: bool = False

    def result(self) -> Generation:
        return Generation(output_ids=self.out, logprobs=self.lps, finish_reason=self.finish)


def mergeable(model: Any) -> bool:
    """Whether the model's KV cache is one this module can merge (full attention in every layer)."""
    cfg = getattr(model, "config", None)
    get = getattr(cfg, "get_text_config", None)
    cfg = get(decoder=True) if callable(get) else cfg
    if getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", True):
        return False
    return all(t == "full_attention" for t in (getattr(cfg, "layer_types", None) or ["full_attention"]))


class RunningBatch:
    """The rows being decoded together and their tensors (see the module docstring)."""

    def __init__(self, model: Any, sample: Sampler, pad: int, prefix: PrefixCache | None = None,
                 packed: PackedLinears | None = None):
        self.model, self.sample, self.pad, self.prefix, self.packed = model, sample, pad, prefix, packed
        self.rows: list[LiveRow] = []
        self.mask: Any = None  # [B, W] long
        self.pos: Any = None  # [B, 1] long: each row's last position
        self.cache: Any = None

    def __len__(self) -> int:
        return len(self.rows)

    # -- joining ---------------------------------------------------------------------------------
    def admit(self, rows: Sequence[LiveRow]) -> list[LiveRow]:
        """Prefill ``rows``, sample their first token and merge them into the batch; returns the rows that
        finished at once. Rows whose prompt starts with a sequence in the prefix cache prefill only the
        rest, one by one; the others together in one left-padded forward."""
        import torch

        found = [(r, *(self.prefix.lookup(r.prompt) if self.prefix is not None else (0, None))) for r in rows]
        cold = [r for r, n, _ in found if not n]
        parts = [self._prefill(cold)] if cold else []
        parts += [self._prefill_cached(r, n, kv) for r, n, kv in found if n]
        first = len(self.rows)
        for new, _, kv, mask, pos in parts:
            if self.rows:
                kv, mask = _merge(_layers(self.cache), self.mask, kv, mask)
                pos = torch.cat([self.pos, pos])
            self.rows = [*self.rows, *new]
            self.cache, self.mask, self.pos = _cache(kv), mask, pos
        return self._sample_rows(torch.cat([p[1] for p in parts]), first=first)

    def _prefill(self, rows: Sequence[LiveRow]) -> tuple[list[LiveRow], Any, KV, Any, Any]:
        """One left-padded forward over ``rows``' prompts: (rows, last logits, keys/values, mask, last positions)."""
        import torch

        width = max(len(r.prompt) for r in rows)
        ids = torch.tensor([[self.pad] * (width - len(r.prompt)) + r.prompt for r in rows], dtype=torch.long)
        mask = torch.tensor([[0] * (width - len(r.prompt)) + [1] * len(r.prompt) for r in rows], dtype=torch.long)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        with torch.inference_mode(), self._linears():
            res = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)
        return list(rows), res.logits[:, -1].float(), _layers(res.past_key_values), mask, pos[:, -1:]

    def _prefill_cached(self, row: LiveRow, n: int, kv: KV) -> tuple[list[LiveRow], Any, KV, Any, Any]:
        """``row``'s prompt after its first ``n`` tokens, on top of their cached keys/values."""
        import torch

        total = len(row.prompt)
        ids = torch.tensor([row.prompt[n:]], dtype=torch.long)
        pos = torch.arange(n, total, dtype=torch.long)[None]
        mask = torch.ones((1, total), dtype=torch.long)
        with torch.inference_mode(), self._linears():
            res = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=_cache(kv),
                             use_cache=True)
        return [row], res.logits[:, -1].float(), _layers(res.past_key_values), mask, pos[:, -1:]

    def _linears(self) -> contextlib.AbstractContextManager[None]:
        """A forward's linears: on the packed copy when there is one."""
        return self.packed.active() if self.packed is not None else contextlib.nullcontext()

    # -- decoding --------------------------------------------------------------------------------
    def step(self) -> list[LiveRow]:
        """One token for every row; returns the rows that finished (and have left the batch)."""
        import torch

        nxt = torch.tensor([[r.out[-1]] for r in self.rows], dtype=torch.long)
        self.mask = torch.cat([self.mask, torch.ones((len(self.rows), 1), dtype=torch.long)], 1)
        self.pos = self.pos + 1
        with torch.inference_mode(), self._linears():
            res = self.model(input_ids=nxt, attention_mask=self.mask, position_ids=self.pos,
                             past_key_values=self.cache, use_cache=True)
        self.cache = res.past_key_values
        return self._sample_rows(res.logits[:, -1].float(), first=0)

    def _sample_rows(self, logits: Any, *, first: int) -> list[LiveRow]:
        """Sample rows ``first..`` from ``logits`` (one per row from ``first``), then drop the finished."""
        for i, r in enumerate(self.rows[first:]):
            if r.cancel.is_set():
                r.done, r.finish = True, "cancelled"
                continue
            tok, lp = self.sample(logits[i], r.params, r.gen)
            r.out.append(tok)
            r.lps.append(lp)
            r.emit(tok, lp)
            if tok in r.stops:
                r.done, r.finish = True, "stop"
            elif len(r.out) >= r.max_new:
                r.done = True
        for r in self.rows[:first]:  # a cancel that came while others joined
            if r.cancel.is_set():
                r.done, r.finish = True, "cancelled"
        return self._drop_done()

    def _drop_done(self) -> list[LiveRow]:
        import torch

        done = [r for r in self.rows if r.done]
        if not done:
            return []
        if self.prefix is not None:
            self._keep()
        keep = [i for i, r in enumerate(self.rows) if not r.done]
        self.rows = [self.rows[i] for i in keep]
        if not keep:
            self.cache = self.mask = self.pos = None
        else:
            idx = torch.tensor(keep, dtype=torch.long)
            self.mask, self.pos = self.mask[idx], self.pos[idx]
            width = int(self.mask.sum(-1).max())  # columns every row has as padding go
            cut = self.mask.shape[1] - width
            self.mask = self.mask[:, cut:]
            self.cache = _cache([(k[idx, :, cut:], v[idx, :, cut:]) for k, v in _layers(self.cache)])
        trim_heap()  # the left rows' keys/values: their pages go back (the cache's growth leaves holes)
        return done

    def _keep(self) -> None:
        """Finished rows' keys/values (prompt + every token fed back) into the prefix cache, copied out of
        the batch's tensors."""
        assert self.prefix is not None
        layers = _layers(self.cache)
        for i, r in enumerate(self.rows):
            if not r.done:
                continue
            ids = r.prompt + r.out[:-1]
            n = int(self.mask[i].sum())
            if n == len(ids):  # the columns this row ran are its last n (left padding before them)
                self.prefix.store(ids, [(k[i:i + 1, :, -n:].clone(), v[i:i + 1, :, -n:].clone()) for k, v in layers])


def _layers(cache: Any) -> list[tuple[Any, Any]]:
    layers = getattr(cache, "layers", None)
    if layers is not None:
        return [(lay.keys, lay.values) for lay in layers]
    return [(cache.key_cache[i], cache.value_cache[i]) for i in range(len(cache.key_cache))]  # transformers < 4.56


def _cache(kv: list[tuple[Any, Any]]) -> Any:
    from transformers import DynamicCache

    return DynamicCache(kv)


def _merge(old: list[tuple[Any, Any]], old_mask: Any, new: list[tuple[Any, Any]], new_mask: Any) \
        -> tuple[list[tuple[Any, Any]], Any]:
    """Two batches' caches and masks as one, each left-padded (masked) to the wider of the two."""
    import torch

    w = max(old_mask.shape[1], new_mask.shape[1])

    def pad_kv(t: Any) -> Any:
        n = w - t.shape[2]
        return t if n == 0 else torch.cat([t.new_zeros((*t.shape[:2], n, t.shape[3])), t], 2)

    def pad_mask(m: Any) -> Any:
        n = w - m.shape[1]
        return m if n == 0 else torch.cat([m.new_zeros((m.shape[0], n)), m], 1)

    kv = [(torch.cat([pad_kv(ko), pad_kv(kn)]), torch.cat([pad_kv(vo), pad_kv(vn)]))
          for (ko, vo), (kn, vn) in zip(old, new, strict=True)]
    return kv, torch.cat([pad_mask(old_mask), pad_mask(new_mask)])
