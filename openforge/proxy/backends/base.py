"""The back-end interface the proxy serves from.

Owns: :class:`Backend` (abstract), :class:`SamplingParams`, :class:`Generation`, :class:`GenContext`,
:class:`TextCompletion` (what a text-level pass-through back-end returns).

A token back-end (``exact = True``) maps prompt token ids to output token ids with the behaviour
logprob of each sampled token. A pass-through back-end (``passthrough = True``, e.g. a teacher API)
instead implements :meth:`Backend.complete` on the canonical request and is recorded ``exact: false``.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Backend", "GenContext", "Generation", "SamplingParams", "TextCompletion"]


class SamplingParams(BaseModel):
    """Sampling the proxy enforces (harness values are recorded, not obeyed, except a smaller
    ``max_tokens``). ``temperature`` is the training temperature; ``top_p=1, top_k=-1`` because
    the trainer does not model truncation."""

    model_config = ConfigDict(extra="forbid")

    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = -1
    max_tokens: int = Field(1024, ge=1)
    seed: int | None = None
    stop_token_ids: list[int] | None = None
    timeout_s: float = Field(600.0, gt=0)


@dataclass
class Generation:
    """Exact output of a token back-end: ids, one logprob per id, and why it stopped
    (``stop`` | ``length`` | ``cancelled``)."""

    output_ids: list[int]
    logprobs: list[float]
    finish_reason: str = "stop"


@dataclass
class GenContext:
    """Who asks: lets a back-end keep per-rollout state (the scripted policy replays per rollout),
    and, for a streaming request, where to send tokens as they are generated.

    A token back-end that can stream calls :meth:`emit` with each batch of new output ids (in order,
    the same ids it finally returns), from the event loop or from a worker thread. A pass-through
    back-end that can stream calls :meth:`start_text` once its upstream has accepted the request, then
    :meth:`emit_text` with each reasoning/text delta (whose concatenation is the text it finally
    returns). Back-ends that call neither are streamed as one final chunk."""

    rollout_id: str = ""
    task_id: str = ""
    call_index: int = 0
    tools: list[dict[str, Any]] = field(default_factory=list)  # canonical function tools
    on_tokens: Callable[[list[int]], None] | None = None  # set by the engine when the request streams
    loop: asyncio.AbstractEventLoop | None = None  # the loop ``on_tokens`` runs on
    on_text_start: Callable[[], None] | None = None  # pass-through streaming: set by the engine
    on_text: Callable[[str, str], None] | None = None

    @property
    def streaming(self) -> bool:
        return self.on_tokens is not None or self.on_text is not None

    def start_text(self) -> None:
        """Pass-through streaming: the upstream answers, the response may start (event loop only)."""
        if self.on_text_start is not None:
            self.on_text_start()
            self.on_text_start = None

    def emit_text(self, reasoning: str = "", text: str = "") -> None:
        """Pass-through streaming: hand on a reasoning and/or text delta (event loop only; a no-op when
        not streaming)."""
        if self.on_text is not None and (reasoning or text):
            self.start_text()
            self.on_text(reasoning, text)

    def emit(self, ids: list[int]) -> None:
        """Hand newly generated ids to the streaming response (thread-safe; a no-op when not streaming)."""
        cb, loop = self.on_tokens, self.loop
        if cb is None or not ids:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is None or running is loop:
            cb(list(ids))
        else:
            try:
                loop.call_soon_threadsafe(cb, list(ids))
            except RuntimeError:  # the loop has closed: nobody is listening any more
                pass


@dataclass
class TextCompletion:
    """Output of a pass-through back-end: text, reasoning and tool calls (canonical form)."""

    text: str = ""
    reasoning: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # {"id","name","arguments": str}
    finish_reason: str = "stop"
    raw: dict[str, Any] = field(default_factory=dict)


class Backend(abc.ABC):
    """Policy back-end. Subclasses set ``exact`` and implement :meth:`generate` (token back-ends)
    or set ``passthrough = True`` and implement :meth:`complete`."""

    exact: bool = True
    passthrough: bool = False
    # False for back-ends that write whole turns themselves (scripted): no forced-tool prefill then.
    honors_prefill: bool = True
    name: str = "backend"

    @property
    @abc.abstractmethod
    def tokenizer(self) -> Any:
        """The HF tokenizer whose ids :meth:`generate` consumes and produces."""

    @property
    def max_context(self) -> int | None:
        """The model's context length in tokens, when known (longer prompts are refused with a 400)."""
        return None

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, ctx: GenContext | None = None
    ) -> Generation:
        raise NotImplementedError(f"{type(self).__name__} does not generate from token ids")

    async def complete(self, request: Any, params: SamplingParams, ctx: GenContext | None = None) -> TextCompletion:
        raise NotImplementedError(f"{type(self).__name__} is not a pass-through back-end")

    async def aclose(self) -> None:
        """Release connections / threads. Idempotent."""
        return None

    def describe(self) -> str:
        return self.name
