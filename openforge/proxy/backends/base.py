"""The back-end interface the proxy serves from.

Owns: :class:`Backend` (what every back-end has) and its two kinds, each with one abstract method —
:class:`TokenBackend` (``generate``: prompt token ids → output ids with the behaviour logprob of each
sampled token, recorded ``exact``) and :class:`MessageBackend` (``complete``: the canonical request →
text and tool calls, e.g. a teacher API, recorded ``exact: false``) — plus :class:`SamplingParams`,
:class:`Generation`, :class:`GenContext` and :class:`TextCompletion` (what a message back-end returns).
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from ..timing import CallTiming

if TYPE_CHECKING:
    from ..canonical import CanonicalRequest

__all__ = ["Backend", "GenContext", "Generation", "MessageBackend", "SamplingParams", "TextCompletion",
           "TokenBackend"]


class SamplingParams(BaseModel):
    """Sampling the proxy enforces (harness values are recorded, not obeyed, except a smaller
    ``max_tokens``). ``temperature`` is the training temperature; ``top_p=1, top_k=-1`` because
    the trainer does not model truncation."""

    model_config = ConfigDict(extra="forbid")

    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = -1
    max_tokens: int = Field(1024, ge=1)
    #: Seeds sampling reproducibly: each request draws from its own seed derived from this one and the
    #: request's rollout id and call index (a group's rows differ); ``None``: the back-end's own, else fresh.
    seed: int | None = None
    stop_token_ids: list[int] | None = None
    timeout_s: float = Field(600.0, gt=0)
    #: A budget of generated tokens for a whole rollout (the proxy's, not a back-end's): each call gets at
    #: most what is left of it, and a call that finds it spent is refused like a context overflow (the
    #: rollout is then the policy's failure). ``None``: no budget.
    rollout_max_tokens: int | None = Field(None, ge=1)


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

    A token back-end calls :meth:`emit` with each batch of new output ids as it samples them (in order,
    the same ids it finally returns, with their logprobs), from the event loop or from a worker thread,
    streaming or not: that is how the call's :attr:`timing` learns when its first token came (the wait
    before it is the server's, the decode after it the policy's) and which tokens a call cancelled
    mid-generation had produced. A back-end with a queue of its own calls :meth:`admit` when it takes
    the call out of it. A pass-through back-end that can stream calls :meth:`start_text` once its
    upstream has accepted the request, then :meth:`emit_text` with each reasoning/text delta (whose
    concatenation is the text it finally returns). Back-ends that call neither are streamed as one
    final chunk, and their first token is taken to come at the end."""

    rollout_id: str = ""
    task_id: str = ""
    call_index: int = 0
    tools: list[dict[str, Any]] = field(default_factory=list)  # canonical function tools
    on_tokens: Callable[[list[int]], None] | None = None  # set by the engine when the request streams
    loop: asyncio.AbstractEventLoop | None = None  # the loop ``on_tokens`` runs on
    on_text_start: Callable[[], None] | None = None  # pass-through streaming: set by the engine
    on_text: Callable[[str, str], None] | None = None
    timing: CallTiming = field(default_factory=CallTiming)  # set by the engine when the call starts
    #: The version of the policy sampling this call: set by a versioned back-end when it picks the weights
    #: (or adapter) it samples with; recorded as the call's ``policy_version``. None: not versioned.
    policy_version: int | None = None

    def admit(self) -> None:
        """The back-end admitted the call from its queue to generation (thread-safe)."""
        self.timing.admit()

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
        if reasoning or text:
            self.timing.text()
        if self.on_text is not None and (reasoning or text):
            self.start_text()
            self.on_text(reasoning, text)

    def emit(self, ids: list[int], logprobs: list[float] | None = None) -> None:
        """Newly generated ids (with their behaviour logprobs): marked on :attr:`timing`, and handed to
        the streaming response when the request streams (thread-safe)."""
        if not ids:
            return
        self.timing.tokens(ids, logprobs)
        cb, loop = self.on_tokens, self.loop
        if cb is None:
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
    """What every policy back-end has: a tokenizer, maybe a context length, a name, ``aclose``.

    A back-end is one of two kinds; subclass the kind, not this class (a class that is neither cannot
    be instantiated):

    - :class:`TokenBackend` implements :meth:`TokenBackend.generate` — prompt ids in, output ids and
      their behaviour logprobs out; its calls are recorded ``exact`` (vLLM, transformers, scripted);
    - :class:`MessageBackend` implements :meth:`MessageBackend.complete` — the canonical request in,
      text and tool calls out (a teacher API); its calls are recorded ``exact: false``.
    """

    #: Whether calls are recorded ``exact`` (token ids and logprobs straight from the sampler).
    exact: bool = True
    #: Set by the kind (:class:`MessageBackend` only): the engine passes the request through as messages.
    passthrough: ClassVar[bool] = False
    # False for back-ends that write whole turns themselves (scripted): no forced-tool prefill then.
    honors_prefill: bool = True
    name: str = "backend"
    #: The version of the policy it serves now (a training run sets it after each update: 0 for the policy
    #: it starts from); stamped on each call it samples (:attr:`GenContext.policy_version`). None: unversioned.
    policy_version: int | None = None

    def __new__(cls, *args: Any, **kwargs: Any) -> Backend:
        if not issubclass(cls, (TokenBackend, MessageBackend)):
            raise TypeError(f"Can't instantiate {cls.__name__}: a back-end subclasses TokenBackend (implement "
                            "generate: token ids in, ids + logprobs out) or MessageBackend (implement complete: "
                            "a canonical request in, text out), not Backend itself")
        return super().__new__(cls)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "passthrough" in cls.__dict__ and cls.__module__ != __name__:
            raise TypeError(f"{cls.__qualname__} sets 'passthrough': the kind says it — subclass MessageBackend "
                            "for a pass-through back-end, TokenBackend otherwise")

    @property
    @abc.abstractmethod
    def tokenizer(self) -> Any:
        """The HF tokenizer of the policy: the ids a token back-end consumes and produces; the ids a
        message back-end's calls are recorded with."""

    @property
    def max_context(self) -> int | None:
        """The model's context length in tokens, when known: a prompt that does not fit is refused
        with the API's overflow 400 and recorded as a ``context_overflow`` call (the outcome rule's
        business), never sent to the back-end to fail there as an infrastructure error."""
        return None

    async def ready(self) -> None:
        """Learn what serving needs from a remote server (e.g. its context length) before a call is
        rendered. Called before every call: return at once when already known; never raise (a server
        that cannot be asked now fails the call itself, where it is recorded)."""
        return None

    async def aclose(self) -> None:
        """Release connections / threads. Idempotent."""
        return None

    def release_caches(self) -> None:
        """Drop what the back-end keeps between calls to serve later ones faster (e.g. reusable prompt
        keys/values). Called when calls pause because the weights are about to change or memory is needed
        for training; the next calls run without the caches. Default: nothing kept."""
        return None

    def describe(self) -> str:
        return self.name


class TokenBackend(Backend):
    """A token-in/token-out back-end: implement :meth:`generate`."""

    passthrough: ClassVar[bool] = False

    @abc.abstractmethod
    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, ctx: GenContext | None = None
    ) -> Generation:
        """Sample a continuation of ``prompt_ids``: the output ids with one behaviour logprob each
        (streamed through ``ctx.emit`` as they come when ``ctx.streaming``)."""


class MessageBackend(Backend):
    """A message-level (pass-through) back-end: implement :meth:`complete`. Its calls are recorded
    ``exact: false``: the output ids are the policy tokenizer's encoding of the text, after the fact."""

    exact = False
    passthrough: ClassVar[bool] = True

    @abc.abstractmethod
    async def complete(self, request: CanonicalRequest, params: SamplingParams,
                       ctx: GenContext | None = None) -> TextCompletion:
        """Answer the canonical ``request`` (relaying deltas through ``ctx.emit_text`` when
        ``ctx.streaming``)."""
