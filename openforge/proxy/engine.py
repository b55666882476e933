"""The serving pipeline behind every wire route: gate → retry replay → render/splice → generate →
stop strings → parse → record (durable) → result.

Owns: :class:`Engine` (pause/resume gate, in-flight accounting, sampling enforcement, retry replay,
cancellation on client disconnect, back-end error/timeout mapping, where a prompt is rendered — inline
when small, in the :class:`~openforge.proxy.tokenpool.TokenPool` when large — the context-overflow
decision (:meth:`Engine.check_context`), starting a streaming request's
:class:`~openforge.proxy.stream.TokenSink`) and :class:`ClientGone`.

**Delivery.** An answered call is recorded ``delivery_uncertain`` before its reply; the route that
sends the reply confirms it (:mod:`.delivery`). A reply that is never sent (the client left while the
call was being made durable) is reported here.

**Replay.** An answer is given again (and not recorded twice) only to a request that says it is a
retry — ``x-stainless-retry-count`` > 0, or an ``Idempotency-Key`` already answered in this rollout —
or that duplicates a request still in flight. An identical body without a marker is a new call: a
harness that asks again gets a new sample.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ..core.errors import BackendContextOverflow, BackendError, BackendTimeout, ContextOverflow, ProxyError
from ..core.types import CallStatus, ModelCall
from .backends.base import Backend, GenContext, Generation, MessageBackend, SamplingParams, TokenBackend
from .canonical import CanonicalRequest, CanonicalResult, ToolCallOut, forced_tool, new_id
from .context_limit import PromptTooLong, budget_spent, context_overflow
from .recorder import Recorder, RolloutState
from .render import Head, Rendered, Renderer
from .stops import StopCut, cut_at_stop
from .stream import TokenSink
from .timing import CallTiming
from .tokenpool import RemoteError, TokenPool, WorkerCrashed
from .wire_fields import FieldCheck

__all__ = ["ClientGone", "Engine"]

log = logging.getLogger("openforge.proxy")
MAX_REPLAY = 256  # answers kept per rollout for retry replay
# Requests at least this large (body bytes, or characters of content when a stored conversation makes it
# larger) render in the token pool (in a thread when the pool is off); smaller ones inline, where they
# cost less than a trip to a worker (benchmarks/proxy_stall.py --sweep measures both).
POOL_MIN_BYTES = 32_000
RENDER_IN_THREAD_CHARS = POOL_MIN_BYTES  # the name before the pool existed


def _size(req: CanonicalRequest) -> int:
    return sum(len(m.get("content") or "") for m in req.messages) + 200 * len(req.tools)


class ClientGone(ConnectionError):
    """The client disconnected before the answer was ready; the call was recorded as cancelled."""


class Engine:
    def __init__(self, backend: Backend, recorder: Recorder, *, renderer: Renderer | None = None,
                 sampling: SamplingParams | None = None, tokenize_passthrough: bool = True,
                 pool: TokenPool | None = None, pool_min_bytes: int = POOL_MIN_BYTES):
        self.backend = backend
        self.recorder = recorder
        self.renderer = renderer or Renderer(backend.tokenizer)
        self.pool = pool  # None: large prompts render in a thread of this process (holding its GIL)
        if backend.max_context:
            _ = self.renderer.max_token_bytes  # derived now, not during the first call
        self.pool_min_bytes = pool_min_bytes
        self.sampling = sampling or SamplingParams()
        self.tokenize_passthrough = tokenize_passthrough
        self._params: dict[int, SamplingParams] = {}  # by max_tokens
        self._params_of = self.sampling
        self._gate = asyncio.Event()
        self._gate.set()
        self._inflight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    # -- pause / resume (weight sync) ----------------------------------------------------------
    @property
    def paused(self) -> bool:
        return not self._gate.is_set()

    async def pause(self) -> None:
        """New calls wait; returns once every in-flight call has finished."""
        self._gate.clear()
        await self._idle.wait()

    async def resume(self) -> None:
        self._gate.set()

    # -- serving ---------------------------------------------------------------------------------
    def params_for(self, req: CanonicalRequest) -> SamplingParams:
        """The enforced sampling for ``req`` (shared, do not mutate): proxy config, a smaller
        ``max_tokens`` if the harness asks for one, and the end-of-turn id among the stop ids."""
        mt = self.sampling.max_tokens
        if req.max_tokens is not None and req.max_tokens > 0:
            mt = min(mt, int(req.max_tokens))
        if self._params_of is not self.sampling:  # the config was replaced: forget what was derived from it
            self._params, self._params_of = {}, self.sampling
        p = self._params.get(mt)
        if p is None:
            stops = set(self.sampling.stop_token_ids or ())
            if self.renderer.eos_id is not None:
                stops.add(self.renderer.eos_id)
            p = self.sampling.model_copy(update={"max_tokens": mt, "stop_token_ids": sorted(stops)})
            if len(self._params) >= 256:
                self._params.clear()
            self._params[mt] = p
        return p

    async def serve(self, st: RolloutState, req: CanonicalRequest, *, body: bytes, retry_count: int = 0,
                    idempotency_key: str | None = None, disconnect: Callable[[], Awaitable[Any]] | None = None,
                    sink: TokenSink | None = None) -> CanonicalResult:
        """Serve one call. With ``sink`` (a streaming request), ``sink.start`` is called once the
        prompt is rendered and generation begins (for a pass-through back-end: once its upstream
        answers), and a streaming back-end pushes its ids (or text deltas) into it as they come; the
        returned result (recorded durably first) stays authoritative. A retry replay, or a back-end
        that does not stream, never starts the sink: the caller then sends the whole answer at once."""
        key = hashlib.sha256(body).hexdigest()
        if idempotency_key:  # one logical request of the SDK: its retries carry the same key
            key += ":" + hashlib.sha256(idempotency_key.encode()).hexdigest()
        retry = retry_count > 0 or (bool(idempotency_key) and key in st.replay)
        hit = st.replay.get(key) if retry else None
        if hit is not None:
            return _as_replay(hit[1])
        pending = st.inflight.get(key)
        if pending is not None and (retry or not pending.done()):
            return _as_replay(await asyncio.shield(pending))
        await self._gate.wait()
        if not st.accepting:  # finish has begun: refused before it is served, never a 200 the trainer misses
            raise ProxyError(f"rollout {st.rollout_id!r} is finished: it takes no more calls", 409)
        self._inflight += 1
        self._idle.clear()
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        st.inflight[key] = fut
        try:
            task = asyncio.ensure_future(self._serve(st, req, body, sink))
            st.track(task)  # finish waits for it (and includes it)
            gone = None
            if disconnect is not None:  # the client hanging up cancels the call (a callback: no asyncio.wait)
                gone = asyncio.ensure_future(disconnect())
                gone.add_done_callback(lambda g: g.cancelled() or task.done() or task.cancel("client disconnected"))
            try:
                result = await task
            except BaseException as e:
                if gone is not None:
                    gone.cancel()
                if isinstance(e, asyncio.CancelledError):
                    if gone is not None and gone.done() and not gone.cancelled():
                        raise ClientGone() from None  # the client left: the call was recorded cancelled
                    if task.cancelled() and st.closing:  # finish gave up waiting: recorded cancelled, no 200
                        raise ProxyError(f"rollout {st.rollout_id!r} was finished while this call was being "
                                         "served; the call was recorded as cancelled", 409) from None
                    await _cancel(task)  # our caller went away (e.g. the streaming response)
                raise
            # On success the watcher is left to end by itself: the server answers its receive() with
            # http.disconnect once the response is complete (cheaper than cancelling it).
            st.replay[key] = (time.monotonic(), result)
            while len(st.replay) > MAX_REPLAY:
                del st.replay[next(iter(st.replay))]
            fut.set_result(result)
            return result
        except BaseException as e:
            if not fut.done():
                fut.set_exception(e if isinstance(e, Exception) else ClientGone())
                fut.exception()  # mark retrieved
            raise
        finally:
            st.inflight.pop(key, None)
            self._inflight -= 1
            if self._inflight == 0:
                self._idle.set()

    async def _serve(self, st: RolloutState, req: CanonicalRequest, body: bytes,
                     sink: TokenSink | None = None) -> CanonicalResult:
        params = self.params_for(req)
        if params.rollout_max_tokens is not None:
            params = await self._within_budget(st, req, body, params)
        rendered, prefix = None, ""
        if not self.backend.passthrough:  # the caller's mistakes surface as 400s before a call exists
            await self.backend.ready()  # e.g. a vLLM server's max_model_len, asked once
            forced = forced_tool(req.tool_choice, req.tools)
            try:
                rendered = await self.render(st, req, limit=self.backend.max_context, size=len(body))
                if forced is not None and self.backend.honors_prefill:
                    prefix = self.renderer.parser.forced_prefix(forced)
                    rendered.ids = rendered.ids + self.renderer.encode(prefix)
                self.check_context(req, len(rendered.ids))
            except ContextOverflow as e:  # the policy's conversation outgrew its context: its doing, recorded
                await self._record_overflow(st, req, body, e, rendered)
                raise
        elif self.tokenize_passthrough:  # before the call: a streamed answer's opening events carry the count
            rendered = await self.render(st, req, size=len(body))
        index = st.take_index()
        clock = CallTiming()  # the call reaches the back-end now: its queue, first token, stalls
        # the served policy's version now; a back-end that picks its weights per call (vLLM's adapter) may
        # overwrite it in generate: the call records the version that sampled it
        ctx = GenContext(rollout_id=st.rollout_id, task_id=st.task_id, call_index=index, tools=req.tools,
                         timing=clock, policy_version=self.backend.policy_version)
        started = time.time()
        call = ModelCall(index=index, api=req.api, request=_request_record(req, body), model=req.model, streamed=req.stream,
                         policy_version=ctx.policy_version,
                         started_at=started, exact=self.backend.exact and not self.backend.passthrough,
                         sampling={"enforced": params.model_dump(exclude_none=True),
                                   "requested": req.requested_sampling(),
                                   **_field_record(req),
                                   **({"stop": req.stop} if req.stop else {})})
        try:
            if self.backend.passthrough:
                result, call = await self._passthrough(st, req, params, ctx, call, sink, rendered)
            else:
                assert rendered is not None
                call.prompt_ids = rendered.ids
                call.system_prefix_len = rendered.system_prefix_len
                if sink is not None and not req.stop:  # with stop strings the answer goes out whole, once cut
                    ctx.on_tokens, ctx.loop = sink.push, asyncio.get_running_loop()
                    sink.start(len(rendered.ids), prefix, call_index=index)
                gen = await self._generate(rendered.ids, params, ctx)
                call.policy_version = ctx.policy_version
                cut = cut_at_stop(gen, req.stop, self.renderer.decode, self.renderer.eos_id) if req.stop else None
                if cut is not None:
                    gen = cut.generation
                result = self._result(gen, len(rendered.ids), prefix, cut)
                if req.extra.get("logprobs"):
                    dec = self.renderer.decode
                    result.token_logprobs = [(dec([t]), lp) for t, lp in zip(gen.output_ids, gen.logprobs)]
                call.output_ids, call.output_logprobs = gen.output_ids, gen.logprobs
                call.finish_reason = result.finish_reason
                call.has_reasoning = bool(result.reasoning)
        except asyncio.CancelledError:
            call.status, call.error = CallStatus.CANCELLED, "client disconnected"
            call.policy_version = ctx.policy_version
            if not self.backend.passthrough:  # what the policy had sampled is kept (trained with the outcome)
                call.output_ids, call.output_logprobs = clock.partial()
                call.finish_reason = "cancelled"
            clock.record(call, produced=bool(call.output_ids) or clock.text_only)
            await asyncio.shield(self.recorder.record(st, call))
            raise
        except ProxyError:
            raise
        except BackendContextOverflow as e:  # the back-end learnt the context only now: the same overflow
            overflow = context_overflow(req.api, e.limit, e.n_tokens)
            call.status, call.error, call.exact = CallStatus.CONTEXT_OVERFLOW, overflow.message, False
            call.output_ids, call.output_logprobs = [], []
            clock.record(call, produced=False)
            await self.recorder.record(st, call)
            raise overflow from None
        except Exception as e:
            call.status, call.error = CallStatus.ERROR, f"{type(e).__name__}: {e}"
            call.output_ids, call.output_logprobs = [], []  # a failed call trains nothing
            clock.record(call, produced=False)
            await self.recorder.record(st, call)
            if isinstance(e, (BackendTimeout, asyncio.TimeoutError)):
                raise ProxyError(f"the policy back-end timed out after {params.timeout_s:g}s", 503,
                                 kind="timeout") from None
            raise ProxyError(f"the policy back-end failed: {e}", 500, kind="api_error") from None
        result.call_index = index
        call.response = result.to_json()
        clock.record(call, produced=bool(call.output_ids) or clock.text_only or bool(result.text or result.tool_calls))
        call.delivery_uncertain = True  # until its reply has gone out whole (Recorder.reply_done)
        try:
            await self.recorder.record(st, call)  # durable before any byte of the reply
        except BaseException:  # no reply will be sent (a cancelled caller: recorded all the same, the write is shielded)
            self.recorder.reply_done(st, index, delivered=False)
            raise
        if call.prompt_ids and call.output_ids:  # the next call of this conversation splices onto these ids
            st.push_head(Head(
                messages=[*req.messages, result.assistant_message()],
                tools_key=self.renderer.tools_key(req.tools),
                ids=call.prompt_ids + call.output_ids,
                ended_with_eos=call.output_ids[-1] == self.renderer.eos_id,
                system_prefix_len=call.system_prefix_len,
            ))
        return result

    async def render(self, st: RolloutState, req: CanonicalRequest, *, limit: int | None = None,
                     size: int = 0) -> Rendered:
        """``req``'s prompt ids (spliced onto ``st``'s heads when it continues one): inline when small, in
        the token pool when large (``size``: the request body's bytes), so that a large prompt holds
        neither the event loop nor the GIL. A prompt whose bytes alone prove it has ``limit`` tokens or
        more is refused untokenized."""
        heads = list(st.heads)
        try:
            if max(size, _size(req)) < self.pool_min_bytes:
                return self.renderer.render(req.messages, req.tools, heads, limit=limit)
            if self.pool is not None and self.pool.usable:
                return await self.pool.render(req.messages, req.tools, heads, limit=limit)
            return await asyncio.to_thread(self.renderer.render, req.messages, req.tools, heads, limit=limit)
        except PromptTooLong as e:
            self.check_context(req, e.min_tokens, n_bytes=e.n_bytes)
            raise AssertionError("unreachable: the byte bound proved an overflow") from None
        except WorkerCrashed as e:
            log.warning("%s", e)
            raise ProxyError(f"the proxy's tokenizer worker failed while rendering this prompt ({e}); "
                             "retry the request", 503, kind="api_error") from None
        except Exception as e:
            name = e.type_name if isinstance(e, RemoteError) else type(e).__name__
            raise ProxyError(f"the conversation cannot be rendered with the chat template: {name}: {e}", 400) from None

    async def _record_overflow(self, st: RolloutState, req: CanonicalRequest, body: bytes, e: ContextOverflow,
                               rendered: Rendered | None) -> None:
        """A refused overflow is still a call of the rollout (status ``context_overflow``, its prompt ids
        when they were counted): the outcome rule makes the rollout a ``policy_failure``, trained as 0."""
        call = ModelCall(index=st.take_index(), api=req.api, request=_request_record(req, body), model=req.model, streamed=req.stream,
                         started_at=time.time(), exact=False, status=CallStatus.CONTEXT_OVERFLOW, error=e.message,
                         prompt_ids=rendered.ids if rendered is not None else [])
        await asyncio.shield(self.recorder.record(st, call))

    async def _within_budget(self, st: RolloutState, req: CanonicalRequest, body: bytes,
                             params: SamplingParams) -> SamplingParams:
        """``params`` with ``max_tokens`` cut to what is left of the rollout's ``rollout_max_tokens``
        budget of generated tokens; a call that finds it spent is refused as a context overflow and
        recorded as one (the outcome rule makes the rollout a ``policy_failure``: the policy spent it)."""
        budget = params.rollout_max_tokens
        assert budget is not None
        used = sum(len(c.output_ids) for c in st.calls)
        if used < budget:
            left = budget - used
            return params if left >= params.max_tokens else params.model_copy(update={"max_tokens": left})
        e = budget_spent(req.api, budget, used)
        await self._record_overflow(st, req, body, e, None)
        raise e

    def check_context(self, req: CanonicalRequest, n_tokens: int, *, n_bytes: int | None = None) -> None:
        """The one context-overflow decision: a prompt of ``n_tokens`` (``n_bytes`` given: at least that
        many, proved from its bytes without tokenizing) that leaves no room in the back-end's context
        is refused with the called API's overflow error, before a call exists."""
        limit = self.backend.max_context
        if limit and n_tokens >= limit:
            raise context_overflow(req.api, limit, n_tokens, n_bytes=n_bytes)

    async def aclose(self) -> None:
        """Stop the token pool's workers (the engine can serve again: they restart on need)."""
        if self.pool is not None:
            await self.pool.aclose()

    async def _generate(self, ids: list[int], params: SamplingParams, ctx: GenContext) -> Generation:
        backend = self.backend
        assert isinstance(backend, TokenBackend)  # the back-end's kind chose this path
        try:
            gen = await asyncio.wait_for(backend.generate(ids, params, ctx), params.timeout_s)
        except BackendTimeout:  # the back-end's own (a TimeoutError too): keep its message
            raise
        except asyncio.TimeoutError:
            raise BackendTimeout(f"no answer within {params.timeout_s:g}s") from None
        if len(gen.logprobs) != len(gen.output_ids):
            raise BackendError(f"back-end returned {len(gen.logprobs)} logprobs for {len(gen.output_ids)} tokens")
        return gen

    def _result(self, gen: Generation, n_prompt: int, prefix: str = "", cut: StopCut | None = None) -> CanonicalResult:
        if cut is not None:  # the text before the stop string; the stop string itself is not returned
            parsed = self.renderer.parser.parse(prefix + cut.text)
        else:
            parsed = self.renderer.parse(gen.output_ids, prefix)
        finish = gen.finish_reason if gen.finish_reason in ("stop", "length") else "stop"
        if parsed.tool_calls and finish == "stop":
            finish = "tool_calls"
        return CanonicalResult(text=parsed.text, reasoning=parsed.reasoning, tool_calls=parsed.tool_calls,
                               finish_reason=finish, prompt_tokens=n_prompt, completion_tokens=len(gen.output_ids),
                               stop_sequence=cut.stop if cut is not None else None)

    async def _passthrough(self, st: RolloutState, req: CanonicalRequest, params: SamplingParams, ctx: GenContext,
                           call: ModelCall, sink: TokenSink | None = None,
                           rendered: Rendered | None = None) -> tuple[CanonicalResult, ModelCall]:
        r = self.renderer
        if rendered is not None:
            # Spliced onto the previous call's ids when the history continues it, as for token back-ends:
            # a long rollout tokenizes each message once, not the whole conversation on every call.
            call.prompt_ids, call.system_prefix_len = rendered.ids, rendered.system_prefix_len
        if sink is not None:  # the back-end starts the response once its upstream answers, then relays deltas
            n_prompt = len(call.prompt_ids)
            ctx.on_text_start = lambda: sink.start(n_prompt, call_index=call.index, text=True)
            ctx.on_text = sink.push_text
        backend = self.backend
        assert isinstance(backend, MessageBackend)  # the back-end's kind chose this path
        try:
            out = await asyncio.wait_for(backend.complete(req, params, ctx), params.timeout_s)
        except BackendTimeout:
            raise
        except asyncio.TimeoutError:
            raise BackendTimeout(f"no answer within {params.timeout_s:g}s") from None
        calls = [ToolCallOut(id=t.get("id") or new_id("call_"), name=t["name"], arguments=t.get("arguments") or "{}")
                 for t in out.tool_calls]
        finish = out.finish_reason
        if calls and finish == "stop":
            finish = "tool_calls"
        result = CanonicalResult(text=out.text, reasoning=out.reasoning, tool_calls=calls, finish_reason=finish)
        usage = out.raw.get("usage") or {}
        result.prompt_tokens = int(usage.get("prompt_tokens") or 0)
        result.completion_tokens = int(usage.get("completion_tokens") or 0)
        if self.tokenize_passthrough:
            call.output_ids = r.encode(r.format_output(out.text, out.reasoning,
                                                       [(t.name, t.args_dict()) for t in calls]))
            result.prompt_tokens = result.prompt_tokens or len(call.prompt_ids)
            result.completion_tokens = result.completion_tokens or len(call.output_ids)
        call.finish_reason = finish
        call.has_reasoning = bool(out.reasoning)
        return result, call


async def _cancel(task: asyncio.Future) -> None:
    task.cancel()
    try:
        await task
    except BaseException:
        pass


def _as_replay(result: CanonicalResult) -> CanonicalResult:
    from dataclasses import replace

    return replace(result, replayed=True)


def _field_record(req: CanonicalRequest) -> dict[str, Any]:
    fields = req.extra.get("fields")
    return fields.record() if isinstance(fields, FieldCheck) else {"overridden": {}}


def _request_record(req: CanonicalRequest, body: bytes) -> dict[str, Any]:
    raw = req.extra.get("raw")
    return raw if isinstance(raw, dict) else {}
