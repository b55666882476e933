"""Gemini API wire adapter (``models/{model}:generateContent`` / ``:streamGenerateContent``): request →
canonical; the answer's JSON and stream shapes are :mod:`.wire_gemini_out`'s.

Owns: :class:`GeminiAdapter` (one per request: the model, whether it streams and how, come from the
path and query, not the body), :func:`gemini_fields` (the body's fields as :mod:`.wire_fields` classifies
them), :func:`gemini_messages` (a recorded body's conversation, for the readers of trajectories) and
:func:`json_schema` (a Gemini ``Schema`` as the JSON Schema a chat template renders).

The API's JSON takes field names in camelCase or snake_case (proto JSON; the ``google-genai`` SDK itself
sends ``parameters_json_schema``): the structural objects are read in either, user data (function
arguments and responses, schema property names) is never renamed. ``contents`` become HF-chat-form
messages: ``model`` → assistant (``thought`` text parts → ``reasoning_content``, ``functionCall`` parts →
``tool_calls``), ``user`` (or the legacy ``function``) → user text and, for ``functionResponse`` parts,
``tool`` messages; consecutive contents of one role are one turn (a streamed answer comes back as one
content per chunk) and their text parts are joined as they were generated. A function response without
an ``id`` takes the id of the open call of that name, so the canonical conversation pairs every result
with its call. ``inlineData`` / ``fileData`` become ``[image]`` / ``[file]`` placeholders; server-side
tools (``googleSearch``, ``codeExecution`` …) and their parts are a 400 naming them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, ClassVar

from ..errors import ProxyError
from ..types import ServedAPI
from .canonical import CanonicalRequest, CanonicalResult, require, stop_strings
from .wire_fields import check_fields
from .wire_gemini_out import GeminiStream, gemini_response

__all__ = ["GeminiAdapter", "camel", "gemini_fields", "gemini_messages", "json_schema"]

_DATA = ("text", "inlineData", "fileData", "functionCall", "functionResponse", "executableCode",
         "codeExecutionResult", "toolCall", "toolResponse")
_NUMBERS = ("temperature", "topP", "topK", "seed", "presencePenalty", "frequencyPenalty")
_MODES = ("MODE_UNSPECIFIED", "AUTO", "ANY", "NONE", "VALIDATED")
_ROLES = {None: "user", "user": "user", "function": "user", "tool": "user", "model": "assistant"}


def camel(key: str) -> str:
    """``max_output_tokens`` → ``maxOutputTokens`` (camelCase keys are returned as they are)."""
    if "_" not in key:
        return key
    head, *rest = key.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


def _obj(value: Any, param: str) -> dict[str, Any]:
    """``value`` as an object with camelCase keys (a 400 naming ``param`` when it is not an object)."""
    require(isinstance(value, dict), f"'{param}' must be an object", param)
    return value if not any("_" in k for k in value) else {camel(k): v for k, v in value.items()}


def gemini_fields(body: dict[str, Any]) -> dict[str, Any]:
    """The body's top-level fields and ``generationConfig.<field>`` entries, camelCased."""
    top = _obj(body, "body")
    out = dict(top)
    gen = top.get("generationConfig")
    if gen is not None:
        for k, v in _obj(gen, "generationConfig").items():
            out["generationConfig." + k] = v
    return out


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


def _system(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    c = _obj(value, "systemInstruction")
    parts = c.get("parts")
    require(isinstance(parts, list), "'systemInstruction.parts' must be a list", "systemInstruction.parts")
    texts = []
    for i, part in enumerate(parts):
        t = _obj(part, f"systemInstruction.parts[{i}]").get("text")
        require(isinstance(t, str), f"'systemInstruction.parts[{i}].text' must be a string (system instructions "
                "are text)", f"systemInstruction.parts[{i}].text")
        texts.append(t)
    return "\n\n".join(texts)


def _response_text(resp: Any, p: str) -> str:
    """A ``functionResponse.response`` as the tool message's text: ``{"output": "x"}`` → ``x``,
    ``{"error": "x"}`` → ``Error: x``, anything else as JSON."""
    if resp is None:
        return ""
    require(isinstance(resp, dict), f"'{p}.response' must be an object", f"{p}.response")
    if len(resp) == 1:
        (k, v), = resp.items()
        if k in ("output", "result", "content") and isinstance(v, str):
            return v
        if k == "error" and isinstance(v, str):
            return v if v.startswith("Error") else f"Error: {v}"
    return json.dumps(resp, ensure_ascii=False)


def _placeholder(part: dict[str, Any], key: str) -> str:
    data = part[key]
    mime = (data.get("mimeType") or data.get("mime_type")) if isinstance(data, dict) else None
    return "[image]" if isinstance(mime, str) and mime.startswith("image/") else "[file]"


class _Turns:
    """Canonical messages built content by content; consecutive contents of one role join one turn."""

    def __init__(self, system: str | None):
        self.out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
        self.role: str | None = None
        self.texts: list[str] = []
        self.thoughts: list[str] = []
        self.calls: list[dict[str, Any]] = []
        self.results: list[dict[str, Any]] = []
        self.open: dict[str, list[str]] = {}  # function name → ids of calls not answered yet

    def flush(self) -> None:
        if self.role == "assistant":
            msg: dict[str, Any] = {"role": "assistant", "content": "".join(self.texts)}
            if any(self.thoughts):
                msg["reasoning_content"] = "".join(self.thoughts)
            if self.calls:
                msg["tool_calls"] = self.calls
            self.out.append(msg)
        elif self.role == "user":
            self.out.extend(self.results)
            if self.texts or not self.results:
                self.out.append({"role": "user", "content": "\n".join(self.texts)})
        self.texts, self.thoughts, self.calls, self.results = [], [], [], []

    def content(self, c: Any, p: str) -> None:
        c = _obj(c, p)
        role = c.get("role")
        require(isinstance(role, str) or role is None, f"'{p}.role' must be a string", f"{p}.role")
        kind = _ROLES.get(role)
        require(kind is not None, f"unsupported role {role!r} in '{p}.role' (use 'user' or 'model')", f"{p}.role")
        if kind != self.role:
            self.flush()
            self.role = kind
        parts = c.get("parts")
        require(parts is None or isinstance(parts, list), f"'{p}.parts' must be a list", f"{p}.parts")
        for j, part in enumerate(parts or ()):
            self.part(_obj(part, f"{p}.parts[{j}]"), f"{p}.parts[{j}]")

    def part(self, part: dict[str, Any], p: str) -> None:
        kinds = [k for k in _DATA if part.get(k) is not None]
        require(len(kinds) == 1, f"'{p}' must hold exactly one of {', '.join(_DATA)}", p)
        key = kinds[0]
        if key == "text":
            require(isinstance(part["text"], str), f"'{p}.text' must be a string", f"{p}.text")
            (self.thoughts if part.get("thought") is True and self.role == "assistant" else self.texts).append(part["text"])
        elif key in ("inlineData", "fileData"):
            self.texts.append(_placeholder(part, key))
        elif key == "functionCall" and self.role == "assistant":
            self.call(_obj(part[key], f"{p}.functionCall"), f"{p}.functionCall")
        elif key == "functionResponse" and self.role == "user":
            self.result(_obj(part[key], f"{p}.functionResponse"), f"{p}.functionResponse")
        elif key in ("functionCall", "functionResponse"):
            raise ProxyError(f"'{p}.{key}' is not allowed in a {'model' if self.role == 'assistant' else 'user'} "
                             "content", 400, param=f"{p}.{key}")
        else:
            raise ProxyError(f"unsupported part '{key}' in '{p}': server-side tools are not supported", 400,
                             param=f"{p}.{key}")

    def call(self, fc: dict[str, Any], p: str) -> None:
        name, args, cid = fc.get("name"), fc.get("args"), fc.get("id")
        require(isinstance(name, str) and name != "", f"'{p}.name' must be a non-empty string", f"{p}.name")
        require(args is None or isinstance(args, dict), f"'{p}.args' must be an object", f"{p}.args")
        require(cid is None or isinstance(cid, str), f"'{p}.id' must be a string", f"{p}.id")
        cid = cid or f"call_{len(self.out)}_{len(self.calls)}"
        self.open.setdefault(name, []).append(cid)
        self.calls.append({"id": cid, "type": "function", "function": {"name": name, "arguments": args or {}}})

    def result(self, fr: dict[str, Any], p: str) -> None:
        name, cid = fr.get("name"), fr.get("id")
        require(isinstance(name, str) and name != "", f"'{p}.name' must be a non-empty string", f"{p}.name")
        require(cid is None or isinstance(cid, str), f"'{p}.id' must be a string", f"{p}.id")
        waiting = self.open.get(name) or []
        if cid in waiting:
            waiting.remove(cid)
        elif not cid and waiting:
            cid = waiting.pop(0)
        text = _response_text(fr.get("response"), p)
        extra = fr.get("parts")
        require(extra is None or isinstance(extra, list), f"'{p}.parts' must be a list", f"{p}.parts")
        for j, sub in enumerate(extra or ()):
            sub = _obj(sub, f"{p}.parts[{j}]")
            key = next((k for k in ("inlineData", "fileData") if sub.get(k) is not None), None)
            require(key is not None, f"'{p}.parts[{j}]' must hold inlineData or fileData", f"{p}.parts[{j}]")
            text += ("\n" if text else "") + _placeholder(sub, key)
        self.results.append({"role": "tool", "content": text, "tool_call_id": cid or ""})


def _messages(contents: Any, system: str | None) -> list[dict[str, Any]]:
    require(isinstance(contents, list) and contents, "'contents' must be a non-empty list", "contents")
    turns = _Turns(system)
    for i, c in enumerate(contents):
        turns.content(c, f"contents[{i}]")
    turns.flush()
    return turns.out


def gemini_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The canonical conversation (system instruction and contents) of a Gemini request body, exactly as
    the proxy rendered it; raises :class:`~openforge.errors.ProxyError` for a body it would refuse."""
    flat = gemini_fields(body)
    return _messages(flat.get("contents"), _system(flat.get("systemInstruction")))


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
