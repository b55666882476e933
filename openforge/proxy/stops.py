"""Stop strings (Chat ``stop``, Messages ``stop_sequences``) applied exactly to a token generation.

Owns: :class:`StopCut`, :func:`cut_at_stop`. The generated ids are cut after the first token whose text
completes the earliest stop string, so the recorded ids (and their logprobs) are exactly tokens the
policy generated and cover the stop string — still exact for training — while the text the client
gets is everything before the stop string, as the APIs specify (the stop string, and the rest of the
token that completes it, are not returned).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .backends.base import Generation

__all__ = ["StopCut", "cut_at_stop"]


@dataclass
class StopCut:
    generation: Generation  # the ids/logprobs up to and including the token that completes the stop string
    text: str  # the generated text before the stop string
    stop: str  # the stop string that matched


def _earliest(text: str, stops: list[str]) -> tuple[int, str] | None:
    hits = [(text.find(s), s) for s in stops if s in text]
    return min(hits, key=lambda h: (h[0], -len(h[1]))) if hits else None


def cut_at_stop(gen: Generation, stops: list[str], decode: Callable[[list[int]], str],
                eos_id: int | None) -> StopCut | None:
    """``gen`` cut at the earliest of ``stops`` in its text, or None when no stop string occurs."""
    ids = gen.output_ids
    body = ids[:-1] if ids and eos_id is not None and ids[-1] == eos_id else ids
    text = decode(body)
    hit = _earliest(text, stops)
    if hit is None:
        return None
    at, stop = hit
    end = at + len(stop)
    lo, hi = 1, len(body)  # the fewest ids whose text reaches past the stop string
    while lo < hi:
        mid = (lo + hi) // 2
        if len(decode(body[:mid]).rstrip("\ufffd")) >= end:
            hi = mid
        else:
            lo = mid + 1
    if not decode(body[:lo]).startswith(text[:end]):  # decoding is not prefix-stable here: keep every id
        lo = len(body)
    cut = Generation(output_ids=body[:lo], logprobs=gen.logprobs[:lo], finish_reason="stop")
    return StopCut(generation=cut, text=text[:at], stop=stop)
