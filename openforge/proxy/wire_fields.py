"""What the proxy does with each top-level request field of the four wire APIs.

Owns: :data:`FIELDS` (per API: field → :class:`WireField`), :func:`check_fields` (called first by each
adapter's ``parse``). Every field is one of:

* **honoured** — it takes effect as the API specifies (``tools``, ``stop``, a smaller ``max_tokens``,
  ``previous_response_id`` …), or it has no effect on what is generated in the real API either
  (``metadata``, ``user``, cache hints) and is kept in the call record;
* **overridden** — the run enforces its own value (training sampling, no penalties, the policy decides
  whether and how long to think): the call's ``sampling["overridden"]`` records what was asked;
* **refused** — a 400 in the API's error shape naming the field (some only for values that would
  change what is generated, e.g. ``n`` other than 1).

A field in no table (harnesses add new ones all the time) is served as if absent — a 400 would fail
every call of such a harness — and never silently: the call's ``sampling["unrecognized"]`` records it
and the proxy logs it once. The user-facing
table is docs/wire-fields.md; ``tests/proxy/test_wire_fields.py`` keeps the two equal and checks each
treatment against the running proxy. The Gemini API's ``generationConfig`` holds most of its
options: its fields are classified one by one, named ``generationConfig.<field>``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..core.errors import ProxyError
from ..core.types import ServedAPI

__all__ = ["FIELDS", "HONOURED", "OVERRIDDEN", "REFUSED", "FieldCheck", "WireField", "check_fields", "markdown_table"]

log = logging.getLogger("openforge.proxy")
HONOURED, OVERRIDDEN, REFUSED = "honoured", "overridden", "refused"
_LOGGED: set[tuple[ServedAPI, str]] = set()  # (api, field) already warned about
API_NAMES: dict[ServedAPI, str] = {"chat": "Chat Completions", "responses": "Responses", "messages": "Messages",
                                   "gemini": "Gemini generateContent"}


@dataclass(frozen=True)
class WireField:
    treatment: str
    note: str
    # refused fields: values that ask for nothing the proxy cannot do (``n: 1``, ``logit_bias: {}``)
    harmless: Callable[[Any], bool] | None = None
    details: dict[str, Any] | None = None  # extra error details (Anthropic ``error.details``)
    accepts: str = ""  # the harmless values, in words (for the docs table)


def _h(note: str) -> WireField:
    return WireField(HONOURED, note)


def _o(note: str) -> WireField:
    return WireField(OVERRIDDEN, note)


def _r(note: str, harmless: Callable[[Any], bool] | None = None, details: dict[str, Any] | None = None,
       accepts: str = "") -> WireField:
    if harmless is _falsy:
        accepts = accepts or "empty / false"
    return WireField(REFUSED, note, harmless, details, accepts)


def _falsy(v: Any) -> bool:
    return not v


_NO_EFFECT = "no effect on what is generated; kept in the call record"
_SAMPLING = "the run's training sampling is enforced"
_THINKING = "the policy decides whether and how long to reason"
_ONE_TIER = "every call is served the same way"

_COMMON_HONOURED = {
    "model": _h("served whatever name is sent; echoed in the response"),
    "stream": _h("SSE event sequence, streamed as tokens are generated"),
    "tools": _h("rendered into the prompt with the chat template; calls parsed back"),
    "tool_choice": _h("`none` hides the tools; a forced tool is prefilled"),
    "metadata": _h(_NO_EFFECT),
}

CHAT: dict[str, WireField] = {
    **_COMMON_HONOURED,
    "messages": _h("rendered with the chat template"),
    "max_completion_tokens": _h("a smaller limit than the run's is applied"),
    "max_tokens": _h("as `max_completion_tokens`"),
    "stop": _h("applied exactly: the text ends before the stop string, the recorded ids end at the token "
               "that completes it"),
    "stream_options": _h("`include_usage` adds the usage chunk"),
    "logprobs": _h("the recorded behaviour logprobs of the generated tokens"),
    "top_logprobs": _r("alternatives are not computed", harmless=lambda v: v == 0, accepts="0"),
    "user": _h(_NO_EFFECT),
    "safety_identifier": _h(_NO_EFFECT),
    "store": _h(_NO_EFFECT + " (every call is recorded anyway)"),
    "prompt_cache_key": _h(_NO_EFFECT + " (the proxy splices history itself)"),
    "prompt_cache_retention": _h(_NO_EFFECT),
    "prompt_cache_options": _h(_NO_EFFECT),
    "temperature": _o(_SAMPLING),
    "top_p": _o(_SAMPLING),
    "seed": _o(_SAMPLING),
    "presence_penalty": _o(_SAMPLING + " (no penalties: the trainer does not model them)"),
    "frequency_penalty": _o(_SAMPLING + " (no penalties: the trainer does not model them)"),
    "reasoning_effort": _o(_THINKING),
    "verbosity": _o("the policy decides how much to write"),
    "parallel_tool_calls": _o("the policy decides how many tools to call"),
    "response_format": _o("not enforced by constrained decoding (the `openai:` pass-through sends it upstream)"),
    "service_tier": _o(_ONE_TIER),
    "moderation": _o("no moderation is applied"),
    "n": _r("the proxy records one sample per call; send n separate requests", harmless=lambda v: v == 1, accepts="1"),
    "logit_bias": _r("the trainer cannot model it", harmless=_falsy),
    "modalities": _r("only text output", harmless=lambda v: v == ["text"], accepts='["text"]'),
    "audio": _r("audio output is not supported"),
    "prediction": _r("predicted outputs are not supported"),
    "functions": _r("legacy 'functions' are not supported; send 'tools'"),
    "function_call": _r("legacy 'function_call' is not supported; send 'tool_choice'"),
    "web_search_options": _r("built-in web search is not supported"),
}

RESPONSES: dict[str, WireField] = {
    **_COMMON_HONOURED,
    "input": _h("rendered with the chat template"),
    "instructions": _h("the leading system turn (not carried over by `previous_response_id`)"),
    "previous_response_id": _h("the conversation is kept per rollout"),
    "max_output_tokens": _h("a smaller limit than the run's is applied"),
    "stream_options": _h(_NO_EFFECT),
    "store": _h("responses are kept per rollout for `previous_response_id` either way"),
    "include": _h("extras are returned where the proxy has them (`reasoning.encrypted_content` is null)"),
    "user": _h(_NO_EFFECT),
    "safety_identifier": _h(_NO_EFFECT),
    "client_metadata": _h(_NO_EFFECT + " (sent by Codex)"),
    "prompt_cache_key": _h(_NO_EFFECT + " (the proxy splices history itself)"),
    "prompt_cache_retention": _h(_NO_EFFECT),
    "prompt_cache_options": _h(_NO_EFFECT),
    "max_tool_calls": _h("hosted tools are never called"),
    "temperature": _o(_SAMPLING),
    "top_p": _o(_SAMPLING),
    "reasoning": _o(_THINKING),
    "text": _o("`format` is not enforced by constrained decoding; `verbosity`: the policy decides"),
    "parallel_tool_calls": _o("the policy decides how many tools to call"),
    "truncation": _o("never truncated: a prompt longer than the context is a 400"),
    "context_management": _o("no server-side compaction: the harness compacts"),
    "service_tier": _o(_ONE_TIER),
    "moderation": _o("no moderation is applied"),
    "top_logprobs": _r("alternatives are not computed", harmless=lambda v: v == 0, accepts="0"),
    "background": _r("background responses are not supported", harmless=_falsy),
    "background_options": _r("background responses are not supported", harmless=_falsy),
    "conversation": _r("stored conversations are not supported; send the input items", harmless=_falsy),
    "prompt": _r("stored prompt templates are not supported; send the input items", harmless=_falsy),
    "image": _r("image generation is not supported", harmless=_falsy),
    "access_programs": _r("not supported", harmless=_falsy),
}

MESSAGES: dict[str, WireField] = {
    **_COMMON_HONOURED,
    "messages": _h("rendered with the chat template"),
    "system": _h("the leading system turn (Claude Code's billing-header line is stripped)"),
    "max_tokens": _h("a smaller limit than the run's is applied"),
    "stop_sequences": _h("applied exactly: `stop_reason: stop_sequence`, the text ends before it, the recorded "
                         "ids end at the token that completes it"),
    "cache_control": _h(_NO_EFFECT + " (the proxy splices history itself)"),
    "betas": _h(_NO_EFFECT),
    "diagnostics": _h(_NO_EFFECT),
    "user_profile_id": _h(_NO_EFFECT),
    "workspace_id": _h(_NO_EFFECT),
    "billing_policy": _h(_NO_EFFECT),
    "fallback_credit_token": _h(_NO_EFFECT),
    "temperature": _o(_SAMPLING),
    "top_p": _o(_SAMPLING),
    "top_k": _o(_SAMPLING),
    "thinking": _o(_THINKING),
    "output_config": _o("`effort`: " + _THINKING + "; `format` is not enforced by constrained decoding"),
    "context_management": _o("no server-side context edits: the harness manages its context"),
    "compaction": _o("no server-side compaction: the harness compacts"),
    "fallbacks": _o("the policy serves every call"),
    "service_tier": _o(_ONE_TIER),
    "speed": _o(_ONE_TIER),
    "inference_geo": _o(_ONE_TIER),
    "thread": _r("server-held threads are not supported; send the full conversation",
                 details={"error_code": "thread_unsupported_request"}),
    "mcp_servers": _r("remote MCP servers are not supported", harmless=_falsy),
    "container": _r("containers are not supported", harmless=_falsy),
}

_GEN = "generationConfig."
GEMINI: dict[str, WireField] = {
    "contents": _h("rendered with the chat template (consecutive contents of one role are one turn)"),
    "systemInstruction": _h("the leading system turn"),
    "tools": _h("`functionDeclarations` rendered into the prompt with the chat template; calls parsed back "
                "(built-in tools such as `googleSearch` are a 400)"),
    "toolConfig": _h("`functionCallingConfig.mode`: `NONE` hides the tools; `ANY` prefills a call (of the one "
                     "function `allowedFunctionNames` names, if it names one)"),
    "generationConfig": _h("each of its fields has its own row (`generationConfig.<field>`)"),
    "model": _h("the model named in the path is served and echoed (`modelVersion`)"),
    "labels": _h(_NO_EFFECT),
    "store": _h(_NO_EFFECT + " (every call is recorded anyway)"),
    "safetySettings": _o("no safety filtering is applied"),
    "serviceTier": _o(_ONE_TIER),
    "cachedContent": _r("server-held cached contents are not supported; send the contents", harmless=_falsy),
    "continuationToken": _r("continuations are not supported: every answer is complete", harmless=_falsy),
    _GEN + "maxOutputTokens": _h("a smaller limit than the run's is applied"),
    _GEN + "stopSequences": _h("applied exactly: the text ends before the stop string, the recorded ids end at the "
                               "token that completes it"),
    _GEN + "responseLogprobs": _h("`logprobsResult.chosenCandidates`: the recorded behaviour logprobs of the "
                                  "generated tokens"),
    _GEN + "temperature": _o(_SAMPLING),
    _GEN + "topP": _o(_SAMPLING),
    _GEN + "topK": _o(_SAMPLING),
    _GEN + "seed": _o(_SAMPLING),
    _GEN + "presencePenalty": _o(_SAMPLING + " (no penalties: the trainer does not model them)"),
    _GEN + "frequencyPenalty": _o(_SAMPLING + " (no penalties: the trainer does not model them)"),
    _GEN + "thinkingConfig": _o(_THINKING),
    _GEN + "responseMimeType": _o("not enforced by constrained decoding"),
    _GEN + "responseSchema": _o("not enforced by constrained decoding"),
    _GEN + "responseJsonSchema": _o("not enforced by constrained decoding"),
    _GEN + "mediaResolution": _o("input images and files are placeholders in the prompt"),
    _GEN + "enableEnhancedCivicAnswers": _o("no answer filtering is applied"),
    _GEN + "routingConfig": _o("the policy serves every call"),
    _GEN + "modelSelectionConfig": _o("the policy serves every call"),
    _GEN + "candidateCount": _r("the proxy records one sample per call; send separate requests",
                                harmless=lambda v: v == 1, accepts="1"),
    _GEN + "logprobs": _r("alternatives (`topCandidates`) are not computed", harmless=lambda v: v == 0, accepts="0"),
    _GEN + "responseModalities": _r("only text output", harmless=lambda v: v in (["TEXT"], ["text"]),
                                    accepts='["TEXT"]'),
    _GEN + "speechConfig": _r("audio output is not supported", harmless=_falsy),
    _GEN + "audioTimestamp": _r("audio input is not supported", harmless=_falsy),
    _GEN + "audioTranscriptionConfig": _r("audio input is not supported", harmless=_falsy),
    _GEN + "imageConfig": _r("image output is not supported", harmless=_falsy),
}

FIELDS: dict[ServedAPI, dict[str, WireField]] = {"chat": CHAT, "responses": RESPONSES, "messages": MESSAGES,
                                                 "gemini": GEMINI}


@dataclass
class FieldCheck:
    """What the call record says about the request's fields."""

    overridden: dict[str, Any] = field(default_factory=dict)  # field -> the value asked for
    unrecognized: list[str] = field(default_factory=list)  # fields in no table, served as if absent

    def record(self) -> dict[str, Any]:
        out: dict[str, Any] = {"overridden": self.overridden}
        if self.unrecognized:
            out["unrecognized"] = self.unrecognized
        return out


def check_fields(api: ServedAPI, body: dict[str, Any]) -> FieldCheck:
    """Refuse the fields of ``body`` the proxy cannot serve (400 naming the field); return the
    overridden and the unrecognized ones for the call record."""
    table = FIELDS[api]
    out = FieldCheck()
    for k, v in body.items():
        f = table.get(k)
        if f is None:
            out.unrecognized.append(k)
            if (api, k) not in _LOGGED and len(_LOGGED) < 1000:
                _LOGGED.add((api, k))
                log.warning("%s request field %r is not one the proxy knows: served as if absent, recorded in the "
                            "call's sampling.unrecognized (see docs/wire-fields.md)", API_NAMES[api], k)
            continue
        if v is None:
            continue
        if f.treatment == REFUSED and not (f.harmless is not None and f.harmless(v)):
            raise ProxyError(f"unsupported field '{k}': {f.note}", 400, param=k, details=f.details)
        if f.treatment == OVERRIDDEN:
            out.overridden[k] = v
    return out


def markdown_table(api: ServedAPI) -> str:
    """The docs/wire-fields.md table of ``api`` (kept equal to it by the tests)."""
    rows = ["| field | treatment | what the proxy does |", "|---|---|---|"]
    for name in sorted(FIELDS[api]):
        f = FIELDS[api][name]
        note = f.note
        if f.accepts:
            note = f"accepted only as {f.accepts}; otherwise a 400: {note}"
        if f.details:
            note += "; `error.details.error_code: \"" + str(f.details.get("error_code")) + "\"`"
        rows.append(f"| `{name}` | {f.treatment} | {note} |")
    return "\n".join(rows)
