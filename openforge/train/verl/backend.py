"""A proxy back-end that generates through veRL's ``server_manager`` (token in, token out).

Owns: :class:`VerlServerBackend`. Inside a veRL AgentLoopWorker the openforge proxy renders each
harness request to prompt ids itself and calls ``server_manager.generate(request_id=<rollout id>,
prompt_ids=..., sampling_params=...)``: the rollout id is veRL's sticky-routing key (every call of a
rollout hits one vLLM replica's prefix cache), sampling comes from veRL (``temperature``, ``top_p``,
``top_k`` of the run, never from the harness), ``logprobs`` is always on and ``max_tokens`` is
always explicit (veRL's default collapses to 1 token for long agent prompts). The weight versions
a rollout saw (``min/max_global_steps``) are kept per rollout for the rows.

Sampling is per rollout: the agent loop opens each session's rollout with veRL's sampling params of
that session (training ``rollout.*`` or validation ``val_kwargs.*``; sessions of both kinds share
one worker) and the proxy names the rollout by the same id, so every call finds its own params. A
call for a rollout that was never opened is refused rather than served with another session's
sampling. :meth:`close_rollout` forgets everything kept for a rollout.

veRL hands each answer over whole and reports no per-request timing, so a call's decode (the policy's
time) is estimated from its token count at the engine's decode rate measured per training step
(:mod:`.latency`) and marked on the call's clock: only the rest of its latency counts as waiting for
the back-end when a rollout runs out of its budget.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ...core.errors import BackendContextOverflow, BackendError
from ...proxy.backends.base import GenContext, Generation, SamplingParams, TokenBackend
from .latency import DecodeRate, PrefillRate

__all__ = ["VerlServerBackend"]

_FINISH = {"completed": "stop", "stop": "stop", "length": "length", "aborted": "cancelled"}


class VerlServerBackend(TokenBackend):
    """Serve proxy calls from a veRL ``LLMServerClient``."""

    exact = True
    name = "verl"

    def __init__(self, server_manager: Any, tokenizer: Any, *, max_model_len: int):
        self.server_manager = server_manager
        self._tokenizer = tokenizer
        self.max_model_len = max_model_len
        self._sampling: dict[str, dict[str, Any]] = {}
        self.steps: dict[str, tuple[int, int]] = {}
        self.prefill_rate = PrefillRate()  # this engine's, per training step: splits that wait into queue and prefill
        self.decode_rate = DecodeRate()  # this engine's, per training step: splits a whole answer's latency

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    @property
    def max_context(self) -> int:
        """veRL's ``max_model_len``: a prompt that leaves no room under it is refused by the proxy and
        recorded as a ``context_overflow`` call (the policy's failure), not sent to the engine to fail
        as a 500 (an infrastructure error that would fail and refill the whole group)."""
        return self.max_model_len

    def open_rollout(self, rollout_id: str, sampling: dict[str, Any]) -> None:
        """Use veRL's sampling params (train or validation) for this rollout's calls."""
        self._sampling[rollout_id] = dict(sampling)

    def close_rollout(self, rollout_id: str) -> tuple[int, int] | None:
        self._sampling.pop(rollout_id, None)
        return self.steps.pop(rollout_id, None)

    def sampling_params(self, prompt_len: int, params: SamplingParams, rollout_id: str) -> dict[str, Any]:
        budget = self.max_model_len - prompt_len
        if budget < 1:
            raise BackendContextOverflow(f"prompt of {prompt_len} tokens leaves no room under max_model_len="
                                         f"{self.max_model_len}", n_tokens=prompt_len, limit=self.max_model_len)
        opened = self._sampling.get(rollout_id)
        if opened is None:
            raise BackendError(f"rollout {rollout_id!r} has no veRL sampling params (the agent loop opens each "
                               "rollout before its harness runs, under the id the proxy serves it by)")
        sp = dict(opened)
        sp.pop("max_tokens", None)
        sp["logprobs"] = True
        sp["max_tokens"] = min(params.max_tokens, budget)
        if params.stop_token_ids:
            sp["stop_token_ids"] = list(params.stop_token_ids)
        return sp

    async def generate(self, prompt_ids: list[int], params: SamplingParams, ctx: GenContext | None = None) -> Generation:
        rid = ctx.rollout_id if ctx is not None else ""
        sp = self.sampling_params(len(prompt_ids), params, rid)
        t0 = time.perf_counter()
        try:
            out = await self.server_manager.generate(request_id=rid, prompt_ids=list(prompt_ids), sampling_params=sp)
        except asyncio.CancelledError:  # the rollout ran out of budget: was the policy still talking?
            since = self.decode_rate.decoding_since(time.perf_counter() - t0, sp["max_tokens"])
            if ctx is not None and since is not None:
                ctx.timing.decoding_since(t0 + since)
            raise
        latency = time.perf_counter() - t0
        ids = list(out.token_ids)
        lps = [float(x) for x in out.log_probs or []]
        if len(lps) != len(ids):
            raise BackendError(f"veRL returned {len(lps)} logprobs for {len(ids)} tokens (is logprobs on?)")
        extra = getattr(out, "extra_fields", None) or {}
        lo, hi = extra.get("min_global_steps"), extra.get("max_global_steps")
        if lo is not None and hi is not None:
            old = self.steps.get(rid)
            self.steps[rid] = (int(lo), int(hi)) if old is None else (min(old[0], int(lo)), max(old[1], int(hi)))
        # the whole answer came at once: its decode (the policy's time) is estimated at the step's rate,
        # and its wait split into the engine's queue and the prefill of its uncached prompt tokens
        step = extra.get("global_steps", hi)
        uncached = max(0, len(prompt_ids) - int(extra.get("num_cached_tokens") or 0))
        per_token = self.prefill_rate.measure(step, uncached, len(ids), latency)
        prefill = uncached * per_token if per_token is not None else 0.0
        wait, decode = self.decode_rate.split(step, len(ids), latency, prefill)
        queued = None if per_token is None else wait - min(wait, prefill)
        if ctx is not None:
            ctx.timing.whole(ids, lps, decode, queued_s=queued)
        return Generation(output_ids=ids, logprobs=lps, finish_reason=_FINISH.get(str(out.stop_reason), "stop"))
