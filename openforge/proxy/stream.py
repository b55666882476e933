"""Incremental streaming: generated token ids → safe reasoning/text deltas while generation runs.

Owns: :class:`TokenSink` (per streaming request: the engine marks when generation starts, the
back-end pushes token ids into it — from the event loop or, through :meth:`GenContext.emit
<openforge.proxy.backends.base.GenContext.emit>`, from a worker thread — or, for a pass-through
back-end, text deltas), :class:`DeltaDecoder` (ids → deltas), :class:`TextDeltas` (a pass-through's
deltas → deltas to send) and :func:`safe_split` (the part of a partial output that the final parse is
guaranteed to keep).

Safety rules, so that the concatenated deltas always equal the final parsed answer:

* the ids are decoded in full each time and trailing U+FFFD (an incomplete UTF-8 sequence of a
  byte-level token) is held back; a trailing end-of-turn id is dropped, as the final parse does;
* while the output may still open with ``<think>`` nothing is sent; inside it, reasoning streams with
  trailing whitespace and a possible partial ``</think>`` held back;
* text streams until the first ``<tool_call>`` (or a possible start of one at the end): from there on
  everything is held, so tool-call markup never leaks as text; trailing whitespace is held (the parse
  strips it).

What is held comes out when generation ends: the adapter sends the final answer's remaining suffix
(:func:`remainder`), then its tool calls and closing events.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

__all__ = ["DeltaDecoder", "TextDeltas", "TokenSink", "remainder", "safe_split"]

log = logging.getLogger("openforge.proxy")
THINK_OPEN, THINK_CLOSE, CALL_OPEN = "<think>", "</think>", "<tool_call>"


def _hold_partial(s: str, marker: str) -> str:
    """``s`` without a trailing partial (proper prefix) of ``marker``."""
    for k in range(min(len(marker) - 1, len(s)), 0, -1):
        if s.endswith(marker[:k]):
            return s[:-k]
    return s


def safe_split(s: str) -> tuple[str, str]:
    """``(reasoning, text)`` of the partial output ``s`` that are prefixes of what the Hermes parser
    returns for any continuation of ``s``."""
    t = s.lstrip()
    if THINK_OPEN.startswith(t):  # undecided (empty or a partial "<think>")
        return "", ""
    reasoning = ""
    if t.startswith(THINK_OPEN):
        body = t[len(THINK_OPEN):]
        end = body.find(THINK_CLOSE)
        if end < 0:
            return _hold_partial(body, THINK_CLOSE).strip(), ""
        reasoning = body[:end].strip()
        t = body[end + len(THINK_CLOSE):].lstrip()
    i = t.find(CALL_OPEN)
    t = t[:i] if i >= 0 else _hold_partial(t, CALL_OPEN)
    return reasoning, t.rstrip()


def remainder(sent: str, final: str | None, what: str) -> str:
    """The part of ``final`` not yet sent (``sent`` is always a prefix of it)."""
    final = final or ""
    if final.startswith(sent):
        return final[len(sent):]
    log.warning("streamed %s is not a prefix of the final answer (%r vs %r)", what, sent[:80], final[:80])
    return ""


class DeltaDecoder:
    """Turns the growing list of generated ids into ``(reasoning_delta, text_delta)`` pairs.

    Decoding is incremental (the scheme of vLLM's detokenizer): each feed decodes only the ids since
    the last settled point, with the previous few ids as context (so tokenizers that drop a leading
    space at the start of a sequence decode the same): decoding a long generation costs O(n), not O(n²)."""

    def __init__(self, renderer: Any, prefix: str = ""):
        self.renderer = renderer
        self.prefix = prefix  # forced-tool prefill text: part of what the parser sees
        self.ids: list[int] = []
        self.decoded = ""  # text of ids[:read], settled
        self._from = 0  # context start: ids[_from:read] are decoded again as context
        self._read = 0
        self._whole = False
        self.reasoning = ""  # sent so far
        self.text = ""

    def _decode_new(self) -> None:
        dec = self.renderer.decode
        if self._whole:
            self.decoded = dec(self.ids).rstrip("\ufffd")
            return
        context = dec(self.ids[self._from:self._read]) if self._read > self._from else ""
        fresh = dec(self.ids[self._from:])
        if not fresh.startswith(context):  # decoding is not prefix-stable here: decode everything from now on
            self._whole = True
            self._decode_new()
        elif len(fresh) > len(context) and not fresh.endswith("\ufffd"):  # held back: a partial character
            self.decoded += fresh[len(context):]
            self._from, self._read = self._read, len(self.ids)

    def feed(self, ids: list[int]) -> tuple[str, str]:
        if not ids:
            return "", ""
        eos = self.renderer.eos_id
        if eos is not None and ids[-1] == eos:  # the end of the turn: not text
            ids = ids[:-1]
        self.ids.extend(ids)
        self._decode_new()
        reasoning, text = safe_split(self.prefix + self.decoded)
        dr = dt = ""
        if len(reasoning) > len(self.reasoning) and reasoning.startswith(self.reasoning) and not self.text:
            dr, self.reasoning = reasoning[len(self.reasoning):], reasoning
        if len(text) > len(self.text) and text.startswith(self.text):
            dt, self.text = text[len(self.text):], text
        return dr, dt


class TextDeltas:
    """A pass-through back-end's ``(reasoning, text)`` deltas → the deltas to send: as they came,
    except that reasoning arriving after text has begun is held (the final answer carries it), as
    :class:`DeltaDecoder` does."""

    def __init__(self) -> None:
        self.reasoning = ""  # sent so far
        self.text = ""

    def feed(self, parts: list[tuple[str, str]]) -> tuple[str, str]:
        dr, dt = [], []
        for r, t in parts:
            if r and not self.text and not dt:
                dr.append(r)
            if t:
                dt.append(t)
        d_r, d_t = "".join(dr), "".join(dt)
        self.reasoning += d_r
        self.text += d_t
        return d_r, d_t


class TokenSink:
    """One streaming request's channel from the back-end to the HTTP response: generated ids from a
    token back-end, or ``(reasoning, text)`` deltas from a pass-through back-end (``text=True``)."""

    def __init__(self) -> None:
        self.started = False
        self.text = False
        self.call_index = -1
        self.prompt_tokens = 0
        self.prefix = ""
        self._items: list[Any] = []
        self._ready = asyncio.Event()  # started, or the call is over
        self._wake = asyncio.Event()  # new items, or the call is over

    def start(self, prompt_tokens: int, prefix: str = "", call_index: int = -1, text: bool = False) -> None:
        """Generation begins: the response may start (its opening events need the prompt length)."""
        self.prompt_tokens, self.prefix, self.call_index, self.text = prompt_tokens, prefix, call_index, text
        self.started = True
        self._ready.set()

    def decoder(self, renderer: Any) -> DeltaDecoder | TextDeltas:
        """What turns :meth:`take`'s items into ``(reasoning, text)`` deltas."""
        return TextDeltas() if self.text else DeltaDecoder(renderer, self.prefix)

    def watch(self, task: asyncio.Future) -> None:
        """Wake the reader when ``task`` (the call being served) ends."""
        task.add_done_callback(self._over)

    def _over(self, _: Any = None) -> None:
        self._ready.set()
        self._wake.set()

    async def ready(self) -> None:
        await self._ready.wait()

    def push(self, ids: list[int]) -> None:
        """New generated ids (event-loop thread only; threads go through ``GenContext.emit``)."""
        self._items.extend(ids)
        self._wake.set()

    def push_text(self, reasoning: str, text: str) -> None:
        """A pass-through back-end's new deltas (event-loop thread only)."""
        self._items.append((reasoning, text))
        self._wake.set()

    def take(self) -> list[Any]:
        items, self._items = self._items, []
        self._wake.clear()
        return items

    async def wait(self) -> None:
        await self._wake.wait()
