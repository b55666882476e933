"""Pass-through to any OpenAI-compatible Chat Completions API (e.g. a teacher model for SFT data).

Owns: :class:`OpenAIBackend`. The canonical request goes upstream as a chat completion; the
answer's text, reasoning and tool calls are served to the harness and recorded. Token ids are
computed locally with the policy tokenizer after the fact, so calls are ``exact: false``: fit for
SFT export, never for RL. When the harness streams, the upstream streams too and its reasoning and
text deltas are relayed as they arrive (tool calls are assembled and sent at the end, as the token
back-ends do); otherwise one non-streaming upstream call answers.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from ...core.errors import BackendError
from ..canonical import to_openai_messages
from ._http import JsonClient, SSEChunks
from .base import GenContext, MessageBackend, SamplingParams, TextCompletion

if TYPE_CHECKING:
    from ..canonical import CanonicalRequest

__all__ = ["OpenAIBackend"]


class OpenAIBackend(MessageBackend):
    """The canonical request as an upstream chat completion (streamed when the harness streams)."""

    def __init__(self, url: str, *, tokenizer: Any = None, model: str | None = None, api_key: str | None = None,
                 timeout_s: float = 600.0, max_connections: int = 1024):
        self.url = url.rstrip("/")
        self.name = f"openai:{self.url}"
        self.model = model
        self._tokenizer = tokenizer
        key = api_key or os.environ.get("OPENFORGE_UPSTREAM_API_KEY") or os.environ.get("OPENAI_API_KEY")
        headers = {"authorization": f"Bearer {key}"} if key else {}
        self._client = JsonClient(headers=headers, timeout_s=timeout_s, max_connections=max_connections,
                                  label=f"upstream {self.url}")

    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            from .hf_loading import load_tokenizer

            self._tokenizer = load_tokenizer("smollm2-135m")
        return self._tokenizer

    def _body(self, request: CanonicalRequest, params: SamplingParams, stream: bool) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model or request.model, "messages": to_openai_messages(request.messages),
                                "max_tokens": params.max_tokens, "stream": stream}
        if stream:
            body["stream_options"] = {"include_usage": True}
        if request.tools:
            body["tools"] = request.tools
            if request.tool_choice is not None and isinstance(request.tool_choice, (str, dict)):
                body["tool_choice"] = request.tool_choice
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.stop:  # the upstream applies it (its text is what gets recorded)
            body["stop"] = request.stop[:4]
        if request.response_format is not None and request.api == "chat":
            body["response_format"] = request.response_format
        return body

    async def complete(self, request: CanonicalRequest, params: SamplingParams,
                       ctx: GenContext | None = None) -> TextCompletion:
        if ctx is not None and ctx.on_text is not None:
            return await self._stream(request, params, ctx)
        data = await self._client.json("POST", self.url + "/chat/completions", self._body(request, params, False))
        return _from_json(data)

    async def _stream(self, request: CanonicalRequest, params: SamplingParams, ctx: GenContext) -> TextCompletion:
        """A streamed upstream call: deltas go on through ``ctx`` as each SSE chunk arrives. An upstream
        that ignores ``stream`` and answers with one JSON body is accepted too."""
        text: list[str] = []
        reasoning: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        finish, usage = None, {}  # finish: the upstream's finish_reason, once it has sent one
        stream = SSEChunks(self._client.stream_lines("POST", self.url + "/chat/completions",
                                                     self._body(request, params, True)), "upstream")
        async for chunks in stream:
            ctx.start_text()  # the upstream is answering: the harness's response may begin
            n_r, n_t = len(reasoning), len(text)
            for chunk in chunks:
                usage = chunk.get("usage") or usage
                for choice in chunk.get("choices") or []:
                    delta = choice.get("delta") or {}
                    r, t = delta.get("reasoning_content") or delta.get("reasoning"), delta.get("content")
                    if r:
                        reasoning.append(r)
                    if t:
                        text.append(t)
                    for tc in delta.get("tool_calls") or []:
                        slot = calls.setdefault(int(tc.get("index", len(calls))), {"id": None, "name": "", "arguments": ""})
                        fn = tc.get("function") or {}
                        slot["id"] = tc.get("id") or slot["id"]
                        slot["name"] += fn.get("name") or ""
                        slot["arguments"] += fn.get("arguments") or ""
                    finish = choice.get("finish_reason") or finish
            ctx.emit_text("".join(reasoning[n_r:]), "".join(text[n_t:]))  # what this read brought, at once
        if not stream.done and finish is None:
            other = stream.other
            if other and not (text or reasoning or calls):  # not a stream at all: one JSON answer
                try:
                    return _from_json(json.loads("\n".join(other)))
                except ValueError:
                    pass
            # a cut stream is not an answer: recording the part as complete would train on it
            raise BackendError(f"upstream stream ended before its finish_reason or [DONE] "
                               f"({len(text)} text deltas so far){': ' + other[0][:200] if other else ''}")
        return TextCompletion(text="".join(text), reasoning="".join(reasoning) or None,
                              tool_calls=[calls[i] for i in sorted(calls) if calls[i]["name"]],
                              finish_reason="length" if finish == "length" else "stop", raw={"usage": usage})

    async def aclose(self) -> None:
        await self._client.aclose()


def _from_json(data: Any) -> TextCompletion:
    """A non-streaming chat completion body → :class:`TextCompletion`."""
    try:
        choice = data["choices"][0]
        msg = choice["message"]
    except (KeyError, IndexError, TypeError) as e:
        raise BackendError(f"upstream returned an unexpected body ({type(e).__name__}: {e})") from None
    calls = [{"id": tc.get("id"), "name": tc["function"]["name"], "arguments": tc["function"].get("arguments") or "{}"}
             for tc in msg.get("tool_calls") or [] if isinstance(tc, dict) and tc.get("function")]
    finish = choice.get("finish_reason") or "stop"
    return TextCompletion(text=msg.get("content") or "", reasoning=msg.get("reasoning_content") or msg.get("reasoning"),
                          tool_calls=calls, finish_reason="length" if finish == "length" else "stop", raw=data)
