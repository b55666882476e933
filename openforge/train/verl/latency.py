"""Where a veRL call's time went: the engine's queue, its prefill, and the policy's decode.

Owns: :class:`DecodeRate`, :class:`PrefillRate`. veRL's ``server_manager.generate`` hands the whole answer over at the end and
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

The wait is split into queue and prefill (:class:`PrefillRate`): each call is a sample of
``latency ≈ prefilled tokens × p + decoded tokens × d`` (its prompt less veRL's ``num_cached_tokens``;
queueing only adds to it), fitted per step by least squares over the least queued half of its calls.
A call's prefill is its uncached prompt tokens × ``p``; it is left out of the call's throughput sample
above (a long prompt is not read as a slow decode), and the rest of its wait is its queue (recorded as
its ``queued_s``; unset until a step has :data:`MIN_FIT_SAMPLES` calls whose prompts and answers vary).
Queue and prefill are both the engine's time, so the split moves no blame between them; the queue
stays in the throughput samples, so under load the decode still errs towards the policy's blame.

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

__all__ = ["MIN_FIT_SAMPLES", "MIN_SAMPLES", "MIN_TOKENS", "DecodeRate", "PrefillRate"]

#: Answers shorter than this say more about prefill and queue than about decode: not samples of the rate.
MIN_TOKENS = 16
#: A step's own prefill fit is used once it has this many calls; the previous step's until then.
MIN_FIT_SAMPLES = 6
#: Calls kept per step for the prefill fit (the most recent).
MAX_FIT_SAMPLES = 1024
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

    def split(self, step: Hashable, n_tokens: int, latency_s: float, prefill_s: float = 0.0) -> tuple[float, float]:
        """Record a call of training ``step`` that produced ``n_tokens`` in ``latency_s`` seconds and
        return its ``(wait_s, decode_s)``: the engine's queue + prefill, and the policy's decode.
        ``prefill_s``: its prefill where known (:class:`PrefillRate`), left out of its throughput sample."""
        latency_s = max(0.0, latency_s)
        if n_tokens <= 0 or latency_s == 0.0:
            return latency_s, 0.0  # nothing generated: all of it was the back-end's
        own = n_tokens / max(latency_s - max(0.0, prefill_s), 1e-3 * latency_s)
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


class PrefillRate:
    """The engine's prefill time per prompt token, measured per training step from its own calls
    (thread-safe): what splits a call's wait into queue and prefill. Each call is a sample ``(prompt tokens prefilled, tokens decoded, latency)``; an unqueued
    call takes ``prefill tokens × p + decoded × d``, a queued one longer, so ``(p, d)`` come from a least
    squares fit of the step's samples that is refitted to the half with the smallest residuals (the
    least queued) twice: queueing only adds time, so it only ever pushes a sample out of that half."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._step: Hashable = None
        self._samples: list[tuple[int, int, float]] = []
        self._last: float | None = None  # the previous step's seconds per prefilled token

    def measure(self, step: Hashable, prefill_tokens: int, n_tokens: int, latency_s: float) -> float | None:
        """Record a call of ``step`` that prefilled ``prefill_tokens`` (uncached) and decoded ``n_tokens`` in
        ``latency_s``; return the seconds per prefilled token it is measured against (``None`` until a
        step has :data:`MIN_FIT_SAMPLES` calls whose prompts and answers vary)."""
        with self._lock:
            if step != self._step:
                self._last = self._measured()
                self._step, self._samples = step, []
            if latency_s > 0.0 and (prefill_tokens > 0 or n_tokens > 0):
                self._samples.append((max(0, prefill_tokens), max(0, n_tokens), latency_s))
                del self._samples[:-MAX_FIT_SAMPLES]
            return self._measured()

    def _measured(self) -> float | None:
        """This step's seconds per prefilled token once it has enough samples, else the last step's."""
        fitted = _lower_fit(self._samples) if len(self._samples) >= MIN_FIT_SAMPLES else None
        return fitted if fitted is not None else self._last

    @property
    def rate(self) -> float | None:
        """The prefill rate a call would be measured against now (tokens/s), or None before any is known."""
        with self._lock:
            per_token = self._measured()
        return 1.0 / per_token if per_token else None


def _lower_fit(samples: list[tuple[int, int, float]]) -> float | None:
    """Seconds per prefilled token from ``latency ≈ prefill × p + decoded × d`` over the least queued
    half of ``samples`` (see :class:`PrefillRate`); None where the samples cannot tell ``p`` apart."""
    kept = samples
    fit = _solve(_sums(kept)[-1])
    for _ in range(2):
        if fit is None:
            return None
        p, d = fit
        ranked = sorted(kept, key=lambda s: s[2] - s[0] * p - s[1] * d)
        prefix = _sums(ranked)  # the sums of each leading run: one pass, not one per candidate length
        for n in range(max(MIN_FIT_SAMPLES // 2, len(ranked) // 2), len(ranked) + 1):  # the least queued half,
            refit = _solve(prefix[n])  # or as few more as it takes to tell p and d apart
            if refit is not None:
                kept, fit = ranked[:n], refit
                break
    return fit[0] if fit is not None else None


_Sums = tuple[float, float, float, float, float]  # Σp², Σn², Σpn, Σp·latency, Σn·latency


def _sums(samples: list[tuple[int, int, float]]) -> list[_Sums]:
    """The least-squares sums of ``samples[:k]`` for every ``k`` (``[0]``: none of them)."""
    out: list[_Sums] = [(0.0, 0.0, 0.0, 0.0, 0.0)]
    for pt, n, lat in samples:
        spp, snn, spn, spl, snl = out[-1]
        out.append((spp + pt * pt, snn + n * n, spn + pt * n, spl + pt * lat, snl + n * lat))
    return out


def _solve(sums: _Sums) -> tuple[float, float] | None:
    """``(p, d)`` minimising the squared error of ``latency - prefill × p - decoded × d`` (no intercept),
    from :func:`_sums`; None when the prompts and answers do not vary independently, or either comes out
    negative."""
    spp, snn, spn, spl, snl = sums
    det = spp * snn - spn * spn
    if det <= 1e-9 * max(1.0, spp * snn):
        return None
    p, d = (spl * snn - snl * spn) / det, (snl * spp - spl * spn) / det
    return (p, d) if p > 0.0 and d >= 0.0 else None


def _high(waits: list[float]) -> float | None:
    """The 90th percentile of ``waits`` (or of any samples; None when there are none)."""
    if not waits:
        return None
    ordered = sorted(waits)
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
