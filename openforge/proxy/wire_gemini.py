"""Gemini API wire adapter (``models/{model}:generateContent`` / ``:streamGenerateContent``): request →
canonical; the answer's JSON and stream shapes are :mod:`.wire_gemini_out`'s, the conversation
(``systemInstruction`` + ``contents`` → messages) is :mod:`openforge.core.gemini_contents`'s.

Owns: :class:`GeminiAdapter` (one per request: the model, whether it streams and how, come from the
path and query, not the body), the function declarations (``tools[].functionDeclarations``: server-side
tools such as ``googleSearch`` are a 400 naming them), ``toolConfig`` and ``generationConfig``, and
:func:`json_schema` (a Gemini ``Schema`` as the JSON Schema a chat template renders).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

from ..core.errors import ProxyError
from ..core.gemini_contents import gemini_fields, gemini_messages, require
from ..core.gemini_contents import obj as _obj
from ..core.types import ServedAPI
from .canonical import CanonicalRequest, CanonicalResult, stop_strings
from .wire_fields import check_fields
from .wire_gemini_out import GeminiStream, gemini_response

__all__ = ["GeminiAdapter", "json_schema"]

_NUMBERS = ("temperature", "topP", "topK", "seed", "presencePenalty", "frequencyPenalty")
_MODES = ("MODE_UNSPECIFIED", "AUTO", "ANY", "NONE", "VALIDATED")


def json_schema(schema: Any, param: str) -> dict[str, Any]:
    """A Gemini ``Schema`` (``type: "OBJECT"`` …) as JSON Schema (``type: "object"``); other keywords kept."""
    s = _obj(schema, param)
    out: dict[str, Any] = {}
    for k, v in s.items():
        if k == "type":
            require(isinstance(v, str), f"'{param}.type' must be a string", f"{param}.type")
            if v.upper() != "TYPE_UNSPECIFIED":
                out[k] = v.lower()
        elif k == "properties":
            require(isinstance(v, dict), f"'{param}.properties' must be an object", f"{param}.properties")
            out[k] = {name: json_schema(sub, f"{param}.properties.{name}") for name, sub in v.items()}
        elif k == "items":
            out[k] = json_schema(v, f"{param}.items")
        elif k == "anyOf":
            require(isinstance(v, list), f"'{param}.anyOf' must be a list", f"{param}.anyOf")
            out[k] = [json_schema(x, f"{param}.anyOf[{i}]") for i, x in enumerate(v)]
        else:
            out[k] = v
    return out


def _declaration(d: Any, p: str) -> dict[str, Any]:
    d = _obj(d, p)
    name = d.get("name")
    require(isinstance(name, str) and name != "", f"'{p}.name' must be a non-empty string", f"{p}.name")
    desc = d.get("description")
    require(desc is None or isinstance(desc, str), f"'{p}.description' must be a string", f"{p}.description")
    params, js = d.get("parameters"), d.get("parametersJsonSchema")
    require(params is None or js is None, f"'{p}' sets both 'parameters' and 'parametersJsonSchema': send one",
            f"{p}.parameters")
    if js is not None:
        require(isinstance(js, dict), f"'{p}.parametersJsonSchema' must be an object", f"{p}.parametersJsonSchema")
        schema = js
    else:
        schema = json_schema(params, f"{p}.parameters") if params is not None else {"type": "object", "properties": {}}
    return {"type": "function", "function": {"name": name, "description": desc or "", "parameters": schema}}


def _tools(tools: Any) -> list[dict[str, Any]]:
    if tools is None:
        return []
    require(isinstance(tools, list), "'tools' must be a list", "tools")
    out: list[dict[str, Any]] = []
    for i, t in enumerate(tools):
        for k, v in _obj(t, f"tools[{i}]").items():
            p = f"tools[{i}].{k}"
            if k != "functionDeclarations":
                raise ProxyError(f"unsupported tool '{k}' in 'tools[{i}]': only functionDeclarations are served "
                                 "(built-in and server-side tools are not supported)", 400, param=p)
            require(isinstance(v, list), f"'{p}' must be a list", p)
            out += [_declaration(d, f"{p}[{j}]") for j, d in enumerate(v)]
    return out


def _tool_choice(config: Any, tools: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], Any]:
    """The tools to render and the canonical tool choice (Messages form) of ``toolConfig``."""
    if config is None:
        return tools, None
    fc = _obj(config, "toolConfig").get("functionCallingConfig")
    if fc is None:
        return tools, None
    fc = _obj(fc, "toolConfig.functionCallingConfig")
    p = "toolConfig.functionCallingConfig"
    mode = fc.get("mode") or "AUTO"
    require(isinstance(mode, str) and mode.upper() in _MODES, f"'{p}.mode' must be one of {', '.join(_MODES)}",
            f"{p}.mode")
    names = fc.get("allowedFunctionNames")
    require(names is None or (isinstance(names, list) and all(isinstance(n, str) for n in names)),
            f"'{p}.allowedFunctionNames' must be a list of strings", f"{p}.allowedFunctionNames")
    mode = mode.upper()
    if mode == "NONE":
        return [], None
    if mode != "ANY":
        return tools, None
    if names:
        known = {t["function"]["name"] for t in tools}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ProxyError(f"'{p}.allowedFunctionNames' names {unknown[0]!r}, which is not a declared function", 400,
                             param=f"{p}.allowedFunctionNames")
        tools = [t for t in tools if t["function"]["name"] in names]
        if len(names) == 1:
            return tools, {"type": "tool", "name": names[0]}
    return tools, {"type": "any"}


def _config(fields: dict[str, Any]) -> tuple[int | None, list[str], bool]:
    """``maxOutputTokens``, ``stopSequences`` and ``responseLogprobs`` of ``generationConfig``, checked."""
    g = "generationConfig."
    for k in _NUMBERS:
        v = fields.get(g + k)
        require(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)),
                f"'{g}{k}' must be a number", g + k)
    mt = fields.get(g + "maxOutputTokens")
    require(mt is None or (isinstance(mt, int) and not isinstance(mt, bool) and mt > 0),
            f"'{g}maxOutputTokens' must be a positive integer", g + "maxOutputTokens")
    lp = fields.get(g + "responseLogprobs")
    require(lp is None or isinstance(lp, bool), f"'{g}responseLogprobs' must be a boolean", g + "responseLogprobs")
    return mt, stop_strings(fields.get(g + "stopSequences"), g + "stopSequences", most=5), bool(lp)


class GeminiAdapter:
    """One Gemini API call: ``model`` from the path, ``stream`` for ``:streamGenerateContent``, ``sse`` for
    ``alt=sse`` (else the stream is one JSON array written element by element, as the API does)."""

    api: ClassVar[ServedAPI] = "gemini"

    def __init__(self, model: str = "", *, stream: bool = False, sse: bool = True):
        self.model, self.streaming, self.sse = model, stream, sse

    def parse(self, body: dict[str, Any], st: Any = None, *, count_only: bool = False) -> CanonicalRequest:
        flat = gemini_fields(body)
        fields = check_fields("gemini", flat)
        max_tokens, stop, logprobs = _config(flat)
        tools, choice = _tool_choice(flat.get("toolConfig"), _tools(flat.get("tools")))
        g = "generationConfig."
        return CanonicalRequest(
            api="gemini", model=self.model, messages=gemini_messages(body),
            tools=tools, tool_choice=choice, max_tokens=max_tokens, stream=self.streaming and not count_only,
            temperature=flat.get(g + "temperature"), top_p=flat.get(g + "topP"), stop=stop,
            extra={"raw": body, "fields": fields, "logprobs": logprobs,
                   "media_type": "text/event-stream" if self.sse else "application/json"},
        )

    def respond(self, req: CanonicalRequest, r: CanonicalResult, st: Any = None) -> dict[str, Any]:
        return gemini_response(req, r)

    def streamer(self, req: CanonicalRequest, st: Any = None, prompt_tokens: int = 0) -> GeminiStream:
        return GeminiStream(req, prompt_tokens, sse=self.sse)

    def stream(self, req: CanonicalRequest, r: CanonicalResult, st: Any = None) -> Iterator[bytes]:
        s = self.streamer(req, st, r.prompt_tokens)
        yield s.open()
        yield s.close(r)
