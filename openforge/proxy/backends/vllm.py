"""Token-in/token-out against a vLLM OpenAI server.

Owns: :class:`VLLMBackend`. Each call posts the exact prompt ids to ``/v1/completions`` with
``logprobs: 0`` (the sampled token's logprob), ``return_token_ids: true`` (vLLM ≥ 0.10.2; falls back
to ``return_tokens_as_token_ids`` ``"token_id:N"`` strings for older servers), ``skip_special_tokens:
false`` and the proxy's enforced sampling, so recorded ids and logprobs are the server's own.
The local tokenizer (SmolLM2's unless given) must be the served model's; the context length is the
server's ``max_model_len`` (read once from ``GET /v1/models``), so an over-long prompt is refused and
recorded as a ``context_overflow`` call rather than failing in vLLM, and ``max_tokens`` is clamped to
the room the prompt leaves (vLLM refuses prompt + ``max_tokens`` over its length with a 400). A server
that does not list its length states it when it refuses: the length is learnt from that 400, the call
sent again clamped, or, when the prompt alone does not fit, recorded as the policy's overflow
(:class:`~openforge.core.errors.BackendContextOverflow`), never as a back-end failure.

Every completion is streamed from the server, whether or not the harness streams (a non-streaming
harness gets the assembled answer): the call's clock (:mod:`openforge.proxy.timing`) then sees when
the first token came and how long the decode took, so the outcome rule counts only the wait before
the first token as the back-end's and the decode as the policy's. A whole answer at the end would
count the policy's decode as waiting: a verbose policy that ran out of its budget would be an
``infra_error``, its long-windedness never penalised. ``/v1/completions`` has no tool parser, so
vLLM #27482 — token ids lost in streamed tool-call chat responses — does not apply; each chunk's ids
go to the harness as they arrive when it streams, and every chunk must carry as many logprobs as ids.

Behaviour logprobs must be the distribution the token was sampled from. vLLM V1 returns *raw*
logprobs (before temperature) unless the server runs with ``--logprobs-mode processed_logprobs``,
a server flag no request can change. So at ``temperature != 1`` a call is refused unless the server
is declared to return processed logprobs: ``vllm:URL?logprobs_mode=processed_logprobs`` (or
``VLLMBackend(..., logprobs_mode="processed_logprobs")``); at temperature 1 both modes agree.

Policy versions. A training run (:mod:`openforge.train.policy_sync`) loads each new LoRA adapter under a
new name and sets :attr:`model` to it together with :attr:`policy_version`; each call records the version of
the adapter (or weights) it named.

A sampling ``seed`` is never sent: in vLLM's CPU build a request carrying a ``seed`` whose prefill is
chunked while other requests run kills the whole engine (every rollout on it then fails as infra), and
no client can tell in advance whether the server will chunk a prompt. Unseeded sampling loses nothing
the training needs: the recorded ids and logprobs are the server's own either way.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ...core.errors import BackendContextOverflow, BackendError, ConfigError
from ._http import HTTPRefused, JsonClient, SSEChunks
from .base import GenContext, Generation, SamplingParams, TokenBackend

__all__ = ["VLLMBackend"]

LogprobsMode = Literal["raw_logprobs", "processed_logprobs"]
_MODES = ("raw_logprobs", "processed_logprobs")
#: How vLLM states its context length when it refuses a request over it (every version since 0.2).
_CONTEXT_RE = re.compile(r"maximum context length is (\d+) tokens")


def _split_mode(url: str) -> tuple[str, str | None]:
    """``URL?logprobs_mode=M`` → (URL without that parameter, M)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    modes = [v for k, v in query if k == "logprobs_mode"]
    rest = urlencode([(k, v) for k, v in query if k != "logprobs_mode"])
    return urlunsplit(parts._replace(query=rest)), (modes[-1] if modes else None)


class VLLMBackend(TokenBackend):
    exact = True

    def __init__(self, url: str, *, tokenizer: Any = None, model: str | None = None, api_key: str | None = None,
                 timeout_s: float = 600.0, max_connections: int = 512, logprobs_mode: LogprobsMode | None = None,
                 max_context: int | None = None):
        url, declared = _split_mode(url)
        mode = logprobs_mode or declared or "raw_logprobs"
        if mode not in _MODES:
            raise ConfigError(f"vllm: logprobs_mode={mode!r}: expected one of {', '.join(_MODES)} (the server's "
                              "--logprobs-mode; logits modes are not logprobs)")
        self.logprobs_mode: str = mode
        self.url = url.rstrip("/")
        if self.url.endswith("/v1"):
            self.url = self.url[:-3]
        self.name = f"vllm:{self.url}"
        self.model = model
        self._max_context = max_context  # None: the server's max_model_len, read from /v1/models
        self._listed = False
        self._tokenizer = tokenizer
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = JsonClient(headers=headers, timeout_s=timeout_s, max_connections=max_connections,
                                  label=f"vLLM at {self.url}")

    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            from .hf_loading import load_tokenizer

            self._tokenizer = load_tokenizer("smollm2-135m")
        return self._tokenizer

    @property
    def max_context(self) -> int | None:
        return self._max_context

    async def ready(self) -> None:
        if not self._listed:
            try:
                await self._list_models()
            except BackendError:  # unreachable now: the call itself fails (and is recorded)
                pass

    async def _list_models(self) -> None:
        """``GET /v1/models``: the served model's id (unless given) and its ``max_model_len`` (vLLM
        lists it with each model), so an over-long prompt is a recorded overflow, not a server 400."""
        data = await self._request("GET", "/v1/models")
        try:
            listed = [m for m in data["data"] if isinstance(m, dict)]
            entry = listed[0] if self.model is None else next((m for m in listed if m.get("id") == self.model), {})
            self.model = self.model or str(entry["id"])
        except (KeyError, IndexError, TypeError):
            raise BackendError(f"{self.url}/v1/models lists no model") from None
        limit = entry.get("max_model_len")  # of the model served under that name (none: not listed)
        if self._max_context is None and isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
            self._max_context = limit
        self._listed = True

    async def _model(self) -> str:
        if self.model is None:
            await self._list_models()
        assert self.model is not None
        return self.model

    async def _request(self, method: str, path: str, json: Any = None) -> Any:
        return await self._client.json(method, self.url + path, json)

    def check_sampling(self, params: SamplingParams) -> None:
        """Refuse sampling whose behaviour logprobs this server would misreport (raw = pre-temperature)."""
        if self.logprobs_mode == "raw_logprobs" and params.temperature != 1.0:
            raise ConfigError(
                f"vllm:{self.url}: temperature {params.temperature:g} needs the logprobs of the tempered "
                "distribution, but vLLM V1 returns raw (pre-temperature) logprobs by default. Start vLLM with "
                "--logprobs-mode processed_logprobs and declare it: vllm:URL?logprobs_mode=processed_logprobs "
                "(or sample at temperature 1)")

    async def generate(self, prompt_ids: list[int], params: SamplingParams, ctx: GenContext | None = None) -> Generation:
        self.check_sampling(params)
        ctx = ctx if ctx is not None else GenContext()
        await self.ready()  # the server's max_model_len, when it lists one
        model = await self._model()
        ctx.policy_version = self.policy_version  # read with the model (adapter) name: the version that samples
        body: dict[str, Any] = {
            "model": model, "prompt": list(prompt_ids),
            "max_tokens": self._room(len(prompt_ids), params.max_tokens),
            "temperature": params.temperature, "top_p": params.top_p, "top_k": params.top_k, "logprobs": 0,
            "return_token_ids": True, "return_tokens_as_token_ids": True, "skip_special_tokens": False,
            "include_stop_str_in_output": True, "stream": True,
        }
        if params.stop_token_ids:
            body["stop_token_ids"] = params.stop_token_ids
        try:
            return await self._stream(body, ctx)
        except HTTPRefused as e:
            if not self._learn_limit(e):
                raise
        # the server refused a request over its context length, which it had not listed: now known
        body["max_tokens"] = self._room(len(prompt_ids), params.max_tokens)
        return await self._stream(body, ctx)

    def _room(self, n_prompt: int, max_tokens: int) -> int:
        """``max_tokens`` clamped to the room the context leaves after the prompt (vLLM refuses a request
        whose prompt plus ``max_tokens`` exceeds ``max_model_len`` with a 400: a late call of a long
        conversation would fail as the back-end's error, not end as the policy's overflow). A prompt
        that leaves no room is the policy's overflow (:class:`BackendContextOverflow`)."""
        limit = self._max_context
        if limit is None:
            return max_tokens
        if n_prompt >= limit:
            raise BackendContextOverflow(f"prompt of {n_prompt} tokens leaves no room under the server's "
                                         f"max_model_len={limit}", n_tokens=n_prompt, limit=limit)
        return min(max_tokens, limit - n_prompt)

    def _learn_limit(self, e: HTTPRefused) -> bool:
        """A 400 that states the server's context length (vLLM: "This model's maximum context length is N
        tokens ..."): keep N as the context (when it was not known, or is smaller) and say so."""
        m = _CONTEXT_RE.search(e.body) if e.status == 400 else None
        if m is None:
            return False
        limit = int(m.group(1))
        if self._max_context is not None and limit >= self._max_context:
            return False  # already clamped to it: the refusal is something else
        self._max_context = limit
        return True

    async def _stream(self, body: dict[str, Any], ctx: GenContext) -> Generation:
        """A completion streamed from the server whether or not the harness streams: each chunk's ids go
        to ``ctx.emit`` as they come (to the harness's response when it streams, and to the call's clock
        either way: the wait before the first token is the server's, the decode after it the policy's)."""
        ids: list[int] = []
        logprobs: list[float] = []
        finish = None
        stream = SSEChunks(self._client.stream_lines("POST", self.url + "/v1/completions", body), "vLLM")
        async for chunks in stream:
            n = len(ids)
            for chunk in chunks:
                for choice in chunk.get("choices") or []:
                    new_ids, new_lps = _ids_and_logprobs(choice)
                    ids += new_ids
                    logprobs += new_lps
                    finish = choice.get("finish_reason") or finish
            ctx.emit(ids[n:], logprobs[n:])  # what this read brought, at once
        if not ids and finish is None and stream.other:  # a server that ignored "stream": one JSON body
            ids, logprobs, finish = _whole(stream.other)
            ctx.emit(ids, logprobs)
        elif not stream.done and finish is None:
            raise BackendError(f"vLLM stream ended early after {len(ids)} tokens")
        return Generation(output_ids=ids, logprobs=logprobs, finish_reason="length" if finish == "length" else "stop")

    async def aclose(self) -> None:
        await self._client.aclose()


def _whole(lines: list[str]) -> tuple[list[int], list[float], str | None]:
    """The ids, logprobs and finish reason of a whole (not streamed) completion body."""
    try:
        choice = json.loads("\n".join(lines))["choices"][0]
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise BackendError(f"vLLM response lacks choices ({type(e).__name__}: {e})") from None
    ids, logprobs = _ids_and_logprobs(choice)
    return ids, logprobs, choice.get("finish_reason") or "stop"


def _ids_and_logprobs(choice: dict[str, Any]) -> tuple[list[int], list[float]]:
    """The sampled ids and their logprobs of one (whole or streamed) completion choice."""
    try:
        lp = choice.get("logprobs") or {}
        logprobs = [float(x) for x in lp.get("token_logprobs") or []]
        ids = choice.get("token_ids")
        if ids is None:
            ids = [int(str(t).split(":", 1)[1]) for t in lp.get("tokens") or []]
        ids = [int(i) for i in ids]
    except (AttributeError, IndexError, TypeError, ValueError) as e:
        raise BackendError(f"vLLM response lacks token ids/logprobs ({type(e).__name__}: {e})") from None
    if len(ids) != len(logprobs):
        raise BackendError(f"vLLM returned {len(ids)} token ids but {len(logprobs)} logprobs")
    return ids, logprobs
