"""The embedded CPU back-end: a transformers causal LM served token-in/token-out.

Owns: :class:`TransformersBackend` — serving a loaded model: request batching, the sampling loop,
exact logprobs, stop ids, cancellation, streaming, weight swaps. Loading the model (``transformers:SPEC``:
an alias or a local dir, dtype, the SmolLM2 GGUF cache) is :mod:`.hf_loading`'s job; its names are
re-exported here for the callers that import them from this module.

Generation is a plain sampling loop with a KV cache, so each sampled token's logprob is exactly
``log_softmax(logits / temperature)[token]`` (greedy when ``temperature == 0``, logprob then under
the unscaled distribution). Requests are batched: those that arrive while a batch runs form the next
batch (up to ``max_batch``, left-padded and attention-masked), generated in a worker thread; a
cancelled request stops at its next token. A streaming request (``ctx.on_tokens`` set) gets each
sampled id pushed to its response as soon as it is sampled (``loop.call_soon_threadsafe`` via
:meth:`GenContext.emit`).

Weight updates: the CPU trainer may update ``backend.model`` in place while the proxy is paused
(``await proxy.pause()`` ... ``await proxy.resume()``), or call :meth:`TransformersBackend.swap_weights`,
which takes the generation lock so no generation ever sees half-updated weights.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from ...errors import BackendError
from .base import GenContext, Generation, SamplingParams, TokenBackend
from .hf_loading import (
    SMOLLM2_ALIASES,
    cache_dir,
    load_model,
    load_smollm2,
    load_tokenizer,
    smollm2_gguf_path,
)

__all__ = [
    "SMOLLM2_ALIASES",
    "TransformersBackend",
    "cache_dir",
    "load_model",
    "load_smollm2",
    "load_tokenizer",
    "smollm2_gguf_path",
]


class _Row:
    __slots__ = ("cancel", "ctx", "fut", "params", "prompt")

    def __init__(self, prompt: list[int], params: SamplingParams, fut: asyncio.Future, ctx: GenContext | None = None):
        self.prompt, self.params, self.fut, self.ctx = prompt, params, fut, ctx
        self.cancel = threading.Event()

    def admit(self) -> None:
        if self.ctx is not None:
            self.ctx.admit()

    def emit(self, tok: int, logprob: float) -> None:
        """One sampled id and its logprob, to the call's timing and (when it streams) its response
        (from the worker thread)."""
        if self.ctx is not None and not self.cancel.is_set():
            self.ctx.emit([tok], [logprob])


class TransformersBackend(TokenBackend):
    """Serve ``model`` (a torch causal LM) with exact ids and logprobs.

    Requests that arrive while a batch is generating wait and then run together, up to
    ``max_batch`` rows (left-padded, attention-masked: each row's logits are its unpadded logits up
    to float rounding). ``max_batch=1`` serves strictly one request at a time."""

    exact = True

    def __init__(self, model: Any, tokenizer: Any, *, seed: int | None = None, max_batch: int = 8):
        self.model = model
        self._tokenizer = tokenizer
        self._lock = asyncio.Lock()
        self._seed = seed
        self._eos = _eos_ids(model, tokenizer)
        self.max_batch = max(1, int(max_batch))
        self._pending: list[_Row] = []
        self._worker: asyncio.Task | None = None
        self.name = getattr(getattr(model, "config", None), "_name_or_path", None) or "transformers"
        self.batches: list[int] = []  # sizes of the batches run (observability, tests)

    @classmethod
    def from_spec(cls, name_or_path: str) -> TransformersBackend:
        model, tok = load_model(name_or_path)
        backend = cls(model, tok)
        backend.name = name_or_path
        return backend

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    @property
    def max_context(self) -> int | None:
        return getattr(getattr(self.model, "config", None), "max_position_embeddings", None)

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, ctx: GenContext | None = None
    ) -> Generation:
        if not prompt_ids:
            raise BackendError("empty prompt")
        self._max_new(prompt_ids, params)  # an over-long prompt fails alone, not its batch
        row = _Row(list(prompt_ids), params, asyncio.get_running_loop().create_future(), ctx)
        self._pending.append(row)
        loop = asyncio.get_running_loop()
        if self._worker is None or self._worker.done() or self._worker.get_loop() is not loop:
            self._pending = [r for r in self._pending if r.fut.get_loop() is loop]  # drop a dead loop's rows
            self._worker = asyncio.ensure_future(self._work())
        try:
            return await asyncio.shield(row.fut)
        except asyncio.CancelledError:
            row.cancel.set()  # the row stops at its next token; the batch goes on
            if row in self._pending:
                self._pending.remove(row)
            raise

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending:
            batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch :]
            async with self._lock:
                self.batches.append(len(batch))
                try:
                    results = await loop.run_in_executor(None, self._generate_rows, batch)
                except BaseException as e:
                    err = e if isinstance(e, Exception) else BackendError(f"generation aborted: {e!r}")
                    for r in batch:
                        if not r.fut.done():
                            r.fut.set_exception(err)
                            r.fut.exception()
                    if not isinstance(e, Exception):
                        raise
                    continue
            for r, g in zip(batch, results):
                if not r.fut.done():
                    r.fut.set_result(g)

    async def swap_weights(self, state_dict: dict[str, Any]) -> None:
        """Load ``state_dict`` into ``self.model`` between two generation batches."""
        async with self._lock:
            await asyncio.to_thread(self.model.load_state_dict, state_dict)

    def _generate_rows(self, rows: list[_Row]) -> list[Generation]:
        for r in rows:  # out of the queue: the batch starts now
            r.admit()
        if len(rows) == 1:
            r = rows[0]
            return [self._generate_sync(r.prompt, r.params, r.cancel, r.emit)]
        return self._generate_batch(rows)

    def _sampler(self, params: SamplingParams) -> Any:
        import torch

        seed = params.seed if params.seed is not None else (self._seed if self._seed is not None else torch.seed())
        return torch.Generator().manual_seed(seed)

    def _max_new(self, prompt: list[int], params: SamplingParams) -> int:
        max_ctx = getattr(self.model.config, "max_position_embeddings", None) or 1 << 30
        if len(prompt) >= max_ctx:
            raise BackendError(f"prompt of {len(prompt)} tokens exceeds the model context of {max_ctx}")
        return max(1, min(params.max_tokens, max_ctx - len(prompt)))

    @staticmethod
    def _sample(logits: Any, params: SamplingParams, gen: Any) -> tuple[int, float]:
        import torch

        if params.temperature <= 0:
            logp = torch.log_softmax(logits, -1)
            tok = int(torch.argmax(logp))
        else:
            logp = torch.log_softmax(logits / params.temperature, -1)
            probs = _truncate(logp.exp(), params.top_p, params.top_k)
            tok = int(torch.multinomial(probs, 1, generator=gen))
        return tok, float(logp[tok])

    def _generate_sync(self, prompt_ids: list[int], params: SamplingParams, cancel: threading.Event,
                       emit: Callable[[int, float], None] | None = None) -> Generation:
        import torch

        max_new = self._max_new(prompt_ids, params)
        gen = self._sampler(params)
        stop_ids = set(self._eos) | set(params.stop_token_ids or ())
        out: list[int] = []
        lps: list[float] = []
        finish = "length"
        with torch.inference_mode():
            inp = torch.tensor([prompt_ids], dtype=torch.long)
            past = None
            for _ in range(max_new):
                if cancel.is_set():
                    finish = "cancelled"
                    break
                res = self.model(input_ids=inp, past_key_values=past, use_cache=True)
                past = res.past_key_values
                tok, lp = self._sample(res.logits[0, -1].float(), params, gen)
                out.append(tok)
                lps.append(lp)
                if emit is not None:
                    emit(tok, lp)
                if tok in stop_ids:
                    finish = "stop"
                    break
                inp = torch.tensor([[tok]], dtype=torch.long)
        return Generation(output_ids=out, logprobs=lps, finish_reason=finish)

    def _generate_batch(self, rows: list[_Row]) -> list[Generation]:
        import torch

        n = len(rows)
        max_new = [self._max_new(r.prompt, r.params) for r in rows]
        gens = [self._sampler(r.params) for r in rows]
        stops = [set(self._eos) | set(r.params.stop_token_ids or ()) for r in rows]
        pad = self._eos[0] if self._eos else 0
        width = max(len(r.prompt) for r in rows)
        ids = torch.tensor([[pad] * (width - len(r.prompt)) + r.prompt for r in rows], dtype=torch.long)
        mask = torch.tensor([[0] * (width - len(r.prompt)) + [1] * len(r.prompt) for r in rows], dtype=torch.long)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        outs: list[list[int]] = [[] for _ in rows]
        lps: list[list[float]] = [[] for _ in rows]
        finish = ["length"] * n
        done = [False] * n
        with torch.inference_mode():
            res = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)
            for _ in range(max(max_new)):
                logits = res.logits[:, -1].float()
                nxt = []
                for i, r in enumerate(rows):
                    if not done[i]:
                        if r.cancel.is_set():
                            done[i], finish[i] = True, "cancelled"
                        else:
                            tok, lp = self._sample(logits[i], r.params, gens[i])
                            outs[i].append(tok)
                            lps[i].append(lp)
                            r.emit(tok, lp)
                            if tok in stops[i]:
                                done[i], finish[i] = True, "stop"
                            elif len(outs[i]) >= max_new[i]:
                                done[i] = True
                    nxt.append(outs[i][-1] if outs[i] and not done[i] else pad)
                if all(done):
                    break
                mask = torch.cat([mask, torch.ones((n, 1), dtype=torch.long)], 1)
                pos = pos[:, -1:] + 1
                res = self.model(input_ids=torch.tensor(nxt, dtype=torch.long)[:, None], attention_mask=mask,
                                 position_ids=pos, past_key_values=res.past_key_values, use_cache=True)
        return [Generation(output_ids=o, logprobs=lp, finish_reason=f) for o, lp, f in zip(outs, lps, finish)]


def _truncate(probs: Any, top_p: float, top_k: int) -> Any:
    import torch

    if top_k and top_k > 0 and top_k < probs.numel():
        kth = torch.topk(probs, top_k).values[-1]
        probs = torch.where(probs >= kth, probs, torch.zeros_like(probs))
    if top_p < 1.0:
        sp, idx = torch.sort(probs, descending=True)
        keep = torch.cumsum(sp, 0) - sp < top_p
        mask = torch.zeros_like(probs, dtype=torch.bool)
        mask[idx[keep]] = True
        probs = torch.where(mask, probs, torch.zeros_like(probs))
    return probs


def _eos_ids(model: Any, tokenizer: Any) -> list[int]:
    ids: set[int] = set()
    for src in (getattr(getattr(model, "generation_config", None), "eos_token_id", None),
                getattr(getattr(model, "config", None), "eos_token_id", None),
                getattr(tokenizer, "eos_token_id", None)):
        if isinstance(src, int):
            ids.add(src)
        elif isinstance(src, (list, tuple)):
            ids.update(int(x) for x in src)
    return sorted(ids)
