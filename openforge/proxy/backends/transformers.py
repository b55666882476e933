"""The embedded CPU back-end: a transformers causal LM served token-in/token-out.

Owns: :class:`TransformersBackend` — serving a loaded model: request batching, the sampling loop,
exact logprobs, stop ids, cancellation, streaming, weight swaps. Loading the model (``transformers:SPEC``:
an alias or a local dir, dtype, the SmolLM2 GGUF cache) is :mod:`.hf_loading`'s job; its names are
re-exported here for the callers that import them from this module.

Generation is a plain sampling loop with a KV cache, so each sampled token's logprob is exactly
``log_softmax(logits / temperature)[token]`` (greedy when ``temperature == 0``, logprob then under
the unscaled distribution). Requests are batched continuously (:mod:`.hf_batch`): one batch decodes in
a worker thread, a request that arrives meanwhile joins it between two tokens (up to ``max_batch`` rows,
left-padded and attention-masked) instead of waiting for the whole batch to end, and each request is
answered the moment it finishes; a cancelled request stops at its next token. Each request samples from
a generator of its own: with a seed (the back-end's ``seed`` or the enforced ``SamplingParams.seed``) it
is seeded with :func:`request_seed` of that seed, the request's rollout id and its call index (a request
without a rollout: its rank among those on this back-end), so the rows of a GRPO group differ while the
same calls of the same rollouts sample the same tokens again (rollout ids are fresh per run unless the
caller names them, as veRL's sessions do); without a seed it is fresh entropy, and torch's global
generator is never reseeded. A prompt that starts with
an earlier call's tokens (an agent's next turn, a shared system prompt) prefills only the rest, from the
keys/values :mod:`.hf_prefix` kept (emptied when the weights change or a pause for training begins). A
streaming request (``ctx.on_tokens`` set) gets each sampled id pushed to its response as soon as it is
sampled (``loop.call_soon_threadsafe`` via :meth:`GenContext.emit`). With ``packed_linears=True`` (CPU,
fp32) the forwards run the model's linears on oneDNN-packed copies of their weights (:mod:`.hf_packed`).

Weight updates: the CPU trainer may update ``backend.model`` in place while the proxy is paused
(``await proxy.pause()`` ... ``await proxy.resume()``), or call :meth:`TransformersBackend.swap_weights`,
which takes the generation lock so no generation ever sees half-updated weights.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import threading
from typing import Any

from ...core.errors import BackendError
from .base import GenContext, Generation, SamplingParams, TokenBackend
from .hf_batch import LiveRow, RunningBatch, mergeable
from .hf_loading import (
    SMOLLM2_ALIASES,
    cache_dir,
    load_model,
    load_smollm2,
    load_tokenizer,
    smollm2_gguf_path,
)
from .hf_packed import PackedLinears
from .hf_prefix import PrefixCache

__all__ = [
    "SMOLLM2_ALIASES",
    "TransformersBackend",
    "cache_dir",
    "load_model",
    "load_smollm2",
    "load_tokenizer",
    "request_seed",
    "smollm2_gguf_path",
]


#: The prefix cache's default budget: ~2,900 tokens of SmolLM2-135M's keys/values in fp32 (46 KB a token),
#: each rollout's latest turn at a concurrency of 4 (a synthetic 4 x 3-turn load reused as many tokens as
#: with 256 MiB and peaked 0.14 GiB lower)
PREFIX_CACHE_BYTES = 128 << 20


def request_seed(base: int, key: str) -> int:
    """One request's sampling seed: ``base`` (the back-end's or the run's seed) mixed with ``key``, what
    tells the request from the others (its rollout id and call index): a group's rows sample differently,
    the same request under the same seed samples the same tokens."""
    digest = hashlib.sha256(f"{base}\0{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1  # a non-negative int64, as torch.Generator takes


class _Row:
    __slots__ = ("answered", "cancel", "ctx", "fut", "params", "prompt", "seed")

    def __init__(self, prompt: list[int], params: SamplingParams, fut: asyncio.Future, ctx: GenContext | None = None,
                 seed: int | None = None):
        self.prompt, self.params, self.fut, self.ctx, self.seed = prompt, params, fut, ctx, seed
        self.cancel = threading.Event()
        self.answered = False

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

    A request that arrives while a batch is generating joins it between two tokens, up to
    ``max_batch`` rows (left-padded, attention-masked: each row's logits are its unpadded logits up
    to float rounding); ``continuous=False``: it waits for the batch to end and runs in the next one.
    ``max_batch=1`` serves strictly one request at a time. A prompt that starts with the tokens of an
    earlier call (its prompt and output: an agent's next turn, or the shared system prompt) prefills only
    the rest, from cached keys/values (:mod:`.hf_prefix`, up to ``prefix_cache_bytes``; 0: off).
    ``packed_linears``: run the linears on oneDNN-packed copies of their weights where supported
    (:mod:`.hf_packed`): a decode step of 2-8 rows in ~0.6-0.8x the time, for a second copy of the linear
    weights while calls are served (off by default: the CPU default's memory budget has no room for it)."""

    exact = True

    def __init__(self, model: Any, tokenizer: Any, *, seed: int | None = None, max_batch: int = 8,
                 continuous: bool = True, prefix_cache_bytes: int = PREFIX_CACHE_BYTES,
                 packed_linears: bool = False):
        self.model = model
        self._tokenizer = tokenizer
        self._lock = asyncio.Lock()
        self._seed = seed
        self._unkeyed = 0  # seeded requests without a rollout so far (their rank keys their seed)
        self._eos = _eos_ids(model, tokenizer)
        self.max_batch = max(1, int(max_batch))
        self._pending: list[_Row] = []  # queued rows (the event loop appends, the worker thread takes)
        self._queue_lock = threading.Lock()
        self._draining = False  # a weight swap waits: the running batch takes no new row
        # rows join a running batch (when the model's cache can be merged; False: a request that arrives
        # while a batch runs waits for it to end, then runs in the next batch with the others that waited)
        self._continuous: bool | None = None if continuous else False
        # keys/values of finished calls, reused by prompts that start with them (:mod:`.hf_prefix`)
        self.prefix: PrefixCache | None = PrefixCache(model, prefix_cache_bytes) if prefix_cache_bytes > 0 else None
        # the linears' weights packed for oneDNN (:mod:`.hf_packed`), made at the first forward when asked for
        self.packed: PackedLinears | None = PackedLinears(model) if packed_linears else None
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
        row = _Row(list(prompt_ids), params, asyncio.get_running_loop().create_future(), ctx,
                   self._request_seed(params, ctx))
        loop = asyncio.get_running_loop()
        with self._queue_lock:
            self._pending.append(row)
            if self._worker is None or self._worker.done() or self._worker.get_loop() is not loop:
                self._pending = [r for r in self._pending if r.fut.get_loop() is loop]  # drop a dead loop's rows
                self._worker = asyncio.ensure_future(self._work())
        try:
            return await asyncio.shield(row.fut)
        except asyncio.CancelledError:
            row.cancel.set()  # the row stops at its next token; the batch goes on
            with self._queue_lock:
                if row in self._pending:
                    self._pending.remove(row)
            raise

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending:
            async with self._lock:
                try:
                    await loop.run_in_executor(None, self._decode)
                except BaseException as e:  # the rows it held were answered with the error
                    if not isinstance(e, Exception):
                        raise

    def _take(self, room: int) -> list[_Row]:
        """Up to ``room`` queued rows, oldest first (none while a weight swap waits: the batch drains)."""
        if room <= 0 or self._draining:
            return []
        with self._queue_lock:
            rows, self._pending = self._pending[:room], self._pending[room:]
        return rows

    def _decode(self) -> None:
        """Worker thread: run one continuous batch until no row is left in it or queued. Rows join between
        two tokens (up to ``max_batch``) and are answered as soon as they finish."""
        if self._continuous is None:
            self._continuous = mergeable(self.model)
        prefix = self.prefix if self.prefix is not None and mergeable(self.model) else None
        batch = RunningBatch(self.model, self._sample, self._eos[0] if self._eos else 0, prefix, self.packed)
        held: list[_Row] = []
        try:
            while True:
                room = self.max_batch - len(batch) if (self._continuous or not len(batch)) else 0
                new = self._take(room)
                if new:
                    for r in new:  # out of the queue: its generation starts now
                        r.admit()
                    held += new
                    self.batches.append(len(batch) + len(new))
                    live = [self._live(r) for r in new]
                    self._answer(batch.admit(live))
                elif len(batch):
                    self._answer(batch.step())
                else:
                    return
                held = [r for r in held if not r.fut.done() and not r.answered]
        except BaseException as e:
            err = e if isinstance(e, Exception) else BackendError(f"generation aborted: {e!r}")
            for r in held:
                if not r.answered:
                    r.answered = True
                    _settle(r.fut, error=err)
            raise

    def _live(self, r: _Row) -> LiveRow:
        return LiveRow(prompt=r.prompt, params=r.params, gen=self._sampler(r.seed),
                       stops=set(self._eos) | set(r.params.stop_token_ids or ()), max_new=self._max_new(r.prompt, r.params),
                       cancel=r.cancel, emit=r.emit, key=r)

    def _answer(self, done: list[LiveRow]) -> None:
        for lr in done:
            self._finish(lr.key, lr.result())

    def _finish(self, row: _Row, gen: Generation) -> None:
        """Answer ``row`` (from the worker thread) the moment it finishes."""
        row.answered = True
        _settle(row.fut, result=gen)

    def release_caches(self) -> None:
        """Empty the prefix cache and drop the packed weights (both also go when the weights change)."""
        if self.prefix is not None:
            self.prefix.clear()
        if self.packed is not None:
            self.packed.release()

    async def swap_weights(self, state_dict: dict[str, Any]) -> None:
        """Load ``state_dict`` into ``self.model`` between two generation batches (the running batch
        takes no new row meanwhile, so it drains)."""
        self._draining = True
        try:
            async with self._lock:
                await asyncio.to_thread(self.model.load_state_dict, state_dict)
        finally:
            self._draining = False
        if self._pending and (self._worker is None or self._worker.done()):
            self._worker = asyncio.ensure_future(self._work())

    def _request_seed(self, params: SamplingParams, ctx: GenContext | None) -> int | None:
        """The request's own seed (see the module docstring); None when nothing seeds it. Called on the
        event loop, in the order requests arrive."""
        base = params.seed if params.seed is not None else self._seed
        if base is None:
            return None
        if ctx is not None and ctx.rollout_id:
            return request_seed(base, f"rollout\0{ctx.rollout_id}\0{ctx.call_index}")
        self._unkeyed += 1
        return request_seed(base, f"request\0{self._unkeyed}")

    @staticmethod
    def _sampler(seed: int | None) -> Any:
        import torch

        return torch.Generator().manual_seed(seed if seed is not None else secrets.randbits(63))

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

def _settle(fut: asyncio.Future, *, result: Generation | None = None, error: BaseException | None = None) -> None:
    """Resolve ``fut`` from any thread, on its own loop (a closed loop: nobody waits any more)."""

    def done() -> None:
        if fut.done():
            return
        if error is not None:
            fut.set_exception(error)
            fut.exception()  # retrieved: a caller that went away leaves no warning
        else:
            fut.set_result(result)

    try:
        fut.get_loop().call_soon_threadsafe(done)
    except RuntimeError:
        pass


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
