"""Where a veRL call's time went: the wait for the engine (queue + prefill) versus the policy's decode.

Owns: :class:`DecodeRate`. veRL's ``server_manager.generate`` hands the whole answer over at the end and
reports no per-request timing (veRL 0.9.1's vLLM server returns a ``TokenOutput`` whose
``extra_fields`` carry ``global_steps``, ``num_cached_tokens`` and ``num_preempted``, nothing of the
engine's own per-request metrics), so neither the first token nor the admission is observable. The
decode is therefore *estimated* from token counts at a rate measured per training step:

- each answered call is a sample of its throughput, ``output tokens / latency`` (its latency includes
  its queue and prefill, so a sample never exceeds the engine's decode rate at that time);
- the step's rate is the median of its samples of at least :data:`MIN_TOKENS` output tokens (short
  answers are mostly prefill and queue); before a step has :data:`MIN_SAMPLES` of them, the last
  step's rate is used; before any step has, the call's own throughput (all its time is then decode:
  the first calls of a run are not blamed on the back-end by a guess);
- a call's decode is ``min(latency, output tokens / rate)``; the rest of its latency is its wait
  (queue and prefill together: veRL does not tell them apart), recorded as its ``first_token_s``;
- a call cut when its rollout ran out of budget hands nothing over (veRL returns no partial answer):
  it is taken to have been decoding since the step's longest usual wait (the 90th percentile of its
  calls' waits) when it ran past that wait but not past that wait plus the decode of its
  ``max_tokens`` (:meth:`DecodeRate.decoding_since`); otherwise it was waiting for the back-end (the
  engine queued it, or stalled: the outcome rule's "the model never answered").

The outcome rule (:mod:`openforge.core.outcome`, rule 5) then blames a timeout on the back-end only by that
wait, as it does for back-ends that stream: a verbose policy that talks past its budget is a trained
``timeout``, not an ``infra_error`` that fails and refills its whole group. The median is robust to a
lone straggler decoding alone at the end of a step (fast) and to a call that queued (slow); under a
uniformly overloaded engine it reads the load as decode, erring towards the policy's blame, never
towards hiding a failure.
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Hashable

__all__ = ["MIN_SAMPLES", "MIN_TOKENS", "DecodeRate"]

#: Answers shorter than this say more about prefill and queue than about decode: not samples of the rate.
MIN_TOKENS = 16
#: A step's own rate is used once it has this many samples; the previous step's until then.
MIN_SAMPLES = 3
#: Samples kept per step (the most recent): bounds memory on a long step.
MAX_SAMPLES = 4096


class DecodeRate:
    """The decode rate of a veRL engine, measured per training step from its own answers (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._step: Hashable = None
        self._samples: list[float] = []  # tokens/s of this step's calls
        self._waits: list[float] = []  # seconds before the first token of this step's calls (estimated)
        self._last: float | None = None  # the previous step's rate
        self._last_wait: float | None = None  # the previous step's longest usual wait

    def split(self, step: Hashable, n_tokens: int, latency_s: float) -> tuple[float, float]:
        """Record a call of training ``step`` that produced ``n_tokens`` in ``latency_s`` seconds and
        return its ``(wait_s, decode_s)``: the engine's queue + prefill, and the policy's decode."""
        latency_s = max(0.0, latency_s)
        if n_tokens <= 0 or latency_s == 0.0:
            return latency_s, 0.0  # nothing generated: all of it was the back-end's
        own = n_tokens / latency_s
        with self._lock:
            if step != self._step:
                if len(self._samples) >= MIN_SAMPLES:
                    self._last = statistics.median(self._samples)
                    self._last_wait = _high(self._waits)
                self._step, self._samples, self._waits = step, [], []
            if n_tokens >= MIN_TOKENS:
                self._samples.append(own)
                del self._samples[:-MAX_SAMPLES]
            rate = self._measured()
            decode = min(latency_s, n_tokens / (rate or own))
            if n_tokens >= MIN_TOKENS and rate is not None:  # a wait measured against a known rate
                self._waits.append(latency_s - decode)
                del self._waits[:-MAX_SAMPLES]
        return latency_s - decode, decode

    def decoding_since(self, elapsed_s: float, max_tokens: int) -> float | None:
        """A call cut after ``elapsed_s`` with nothing handed over (veRL gives no partial answer): the
        seconds after its start at which it is taken to have begun decoding — the step's longest usual
        wait (the 90th percentile of its calls' waits), when the call has run past it but not past that
        wait plus the decode of ``max_tokens`` at the step's rate (it would have finished by then: the
        engine stalled). None: it was waiting for the back-end, or no rate is known yet."""
        with self._lock:
            rate, wait = self._measured(), _high(self._waits)
            if wait is None or len(self._samples) < MIN_SAMPLES:
                wait = self._last_wait
        if rate is None or wait is None or not wait < elapsed_s <= wait + max_tokens / rate:
            return None
        return wait

    def _measured(self) -> float | None:
        """This step's rate once it has enough samples, else the last step's (lock held)."""
        if len(self._samples) >= MIN_SAMPLES:
            return statistics.median(self._samples)
        return self._last

    @property
    def rate(self) -> float | None:
        """The rate a call would be measured against now (tokens/s), or None before any is known."""
        with self._lock:
            return self._measured()


def _high(waits: list[float]) -> float | None:
    """The 90th percentile of ``waits`` (None when there are none)."""
    if not waits:
        return None
    ordered = sorted(waits)
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
