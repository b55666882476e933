"""Where one model call's time went, as its back-end reports it, and the tokens it had generated.

Owns: :class:`CallTiming`. The engine starts one per call when it hands the prompt to the back-end
(``GenContext.timing``); the back-end marks, from any thread, when it admitted the call to generation
(:meth:`CallTiming.admit`) and each batch of tokens as it is sampled (:meth:`CallTiming.tokens`, which
``GenContext.emit`` calls). From that the engine records on the call (:meth:`CallTiming.record`):

- ``queued_s``: start → admitted (the back-end's own queue), when the back-end says;
- ``first_token_s``: start → first token (queue + prefill: the server's time). A back-end that hands
  its whole answer over at the end either estimates its decode and queue (:meth:`CallTiming.whole`:
  veRL, from token counts at rates measured per step) or reports its first token at the end: all its
  time then counts as waiting;
- ``max_token_gap_s``: the longest stretch after the first token with no new token, up to the end
  (a model that stalled mid-generation).

The decode time (``latency_s - first_token_s``) is the policy's: it chose how much to say. The outcome
rule (:mod:`openforge.core.outcome`, rule 5) blames a timeout on the back-end only by the waiting.

It also keeps the ids and logprobs generated so far, so that a call cancelled mid-generation keeps
the tokens the policy had sampled (:meth:`CallTiming.partial`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..core.types import ModelCall

__all__ = ["CallTiming"]


class CallTiming:
    """The clock of one call (``time.perf_counter`` seconds), safe to mark from a worker thread."""

    __slots__ = ("_lock", "admitted", "first", "ids", "last", "logprobs", "max_gap", "start", "text_only")

    def __init__(self, start: float | None = None):
        self.start = time.perf_counter() if start is None else start
        self.admitted: float | None = None
        self.first: float | None = None
        self.last: float | None = None
        self.max_gap = 0.0
        self.ids: list[int] = []
        self.logprobs: list[float] | None = []  # None once a batch came without logprobs: nothing kept
        self.text_only = False
        self._lock = threading.Lock()

    def admit(self) -> None:
        """The back-end took the call out of its queue and began generating it (first mark wins)."""
        if self.admitted is None:
            self.admitted = time.perf_counter()

    def tokens(self, ids: Sequence[int], logprobs: Sequence[float] | None = None) -> None:
        """``ids`` were just generated (with their behaviour logprobs when the back-end has them)."""
        if not ids:
            return
        now = time.perf_counter()
        with self._lock:
            self._tick(now)
            self.ids.extend(ids)
            if self.logprobs is not None and logprobs is not None and len(logprobs) == len(ids):
                self.logprobs.extend(float(x) for x in logprobs)
            else:
                self.logprobs = None

    def whole(self, ids: Sequence[int], logprobs: Sequence[float] | None, decode_s: float,
              queued_s: float | None = None) -> None:
        """A back-end that hands its answer over whole (no token stream to mark) gives the ``ids`` now with
        its own estimate of how long their decode took: the first token is put ``decode_s`` before now
        (never before the call started), so only the time before it counts as waiting; ``queued_s``: its
        estimate of the part of that wait spent in its queue (the rest was prefill)."""
        now = time.perf_counter()
        with self._lock:
            if not ids or self.first is not None:  # nothing, or tokens already marked as they came
                return
            self.first = min(now, max(self.start, now - max(0.0, decode_s)))
            if queued_s is not None and self.admitted is None:
                self.admitted = self.start + min(max(0.0, queued_s), self.first - self.start)
            self.last = now
            self.ids.extend(ids)
            if self.logprobs is not None and logprobs is not None and len(logprobs) == len(ids):
                self.logprobs.extend(float(x) for x in logprobs)
            else:
                self.logprobs = None

    def decoding_since(self, t: float) -> None:
        """A back-end that hands nothing over until the end was cut mid-call, and estimates that it had
        been decoding since ``t`` (a ``time.perf_counter`` reading): the call is marked as answering
        from then until now (no ids: nothing is kept)."""
        now = time.perf_counter()
        with self._lock:
            if self.first is None:
                self.first = min(now, max(self.start, t))
                self.last = now

    def text(self) -> None:
        """A pass-through back-end's upstream sent a text delta (no ids: nothing is kept)."""
        with self._lock:
            self._tick(time.perf_counter())
            self.text_only = True

    def _tick(self, now: float) -> None:
        if self.first is None:
            self.first = now
            self.admit()
        elif self.last is not None:
            self.max_gap = max(self.max_gap, now - self.last)
        self.last = now

    def partial(self) -> tuple[list[int], list[float]]:
        """The ids generated so far with their logprobs (both empty when some came without)."""
        with self._lock:
            if self.logprobs is None:
                return [], []
            n = min(len(self.ids), len(self.logprobs))
            return self.ids[:n], self.logprobs[:n]

    def record(self, call: ModelCall, end: float | None = None, *, produced: bool | None = None) -> None:
        """Set ``call``'s ``latency_s``, ``queued_s``, ``first_token_s`` and ``max_token_gap_s`` at ``end``.
        ``produced``: the call has output although no token was marked (the back-end handed it over
        whole): its first token is then its end."""
        end = time.perf_counter() if end is None else end
        with self._lock:
            call.latency_s = end - self.start
            if self.admitted is not None:
                call.queued_s = max(0.0, self.admitted - self.start)
            first = self.first
            if first is None and (produced if produced is not None else bool(call.output_ids)):
                first = end
            if first is not None:
                call.first_token_s = max(0.0, first - self.start)
                last = self.last if self.last is not None else first
                call.max_token_gap_s = max(self.max_gap, end - last)
