"""The seam between the proxy's model routes and its four wire adapters (Chat Completions,
Responses, Messages, Gemini).

Owns: :class:`WireAdapter` (a wire API's request → :class:`~.canonical.CanonicalRequest`, and a
:class:`~.canonical.CanonicalResult` → its JSON answer or its whole SSE event sequence) and
:class:`WireStream` (the events of one live streaming answer: opening, deltas, then closing or
failure). :class:`~.wire_chat.ChatAdapter`, :class:`~.wire_responses.ResponsesAdapter` and
:class:`~.wire_messages.MessagesAdapter` and :class:`~.wire_gemini.GeminiAdapter` satisfy them structurally.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from ..core.errors import ProxyError
from ..core.types import ServedAPI
from .canonical import CanonicalRequest, CanonicalResult

__all__ = ["WireAdapter", "WireStream"]


class WireStream(Protocol):
    """The SSE events of one live answer, each as the bytes to write."""

    def open(self) -> bytes: ...

    def delta(self, reasoning: str = "", text: str = "") -> bytes: ...

    def fail(self, e: ProxyError) -> bytes: ...

    def close(self, r: CanonicalResult) -> bytes: ...


class WireAdapter(Protocol):
    """One wire API: parses its requests into the canonical form and writes canonical results back in
    its own shape. ``st`` is the rollout's state (Responses keeps ``previous_response_id`` there)."""

    @property
    def api(self) -> ServedAPI: ...

    def parse(self, body: dict[str, Any], st: Any = None) -> CanonicalRequest: ...

    def respond(self, req: CanonicalRequest, r: CanonicalResult, st: Any = None) -> dict[str, Any]: ...

    def stream(self, req: CanonicalRequest, r: CanonicalResult, st: Any = None) -> Iterator[bytes]: ...

    def streamer(self, req: CanonicalRequest, st: Any = None, prompt_tokens: int = 0) -> WireStream: ...
