"""The conversation of a Gemini API request body (``systemInstruction`` and ``contents``) in the
canonical HF-chat form: what the proxy renders for a Gemini call, and what the readers of recorded calls
(tool steps, reasoning replay, the report) see in one.

Owns: :func:`gemini_messages`, :func:`gemini_fields` (the body's fields camelCased, ``generationConfig``'s
as ``generationConfig.<field>``), :func:`camel` and :func:`obj` (a structural object read with camelCase
keys). Pure; a body it cannot read raises :class:`~openforge.core.errors.ProxyError` (400) naming the field.

The API's JSON takes field names in camelCase or snake_case (proto JSON; the ``google-genai`` SDK itself
sends ``parameters_json_schema``): the structural objects are read in either, user data (function
arguments and responses) is never renamed. ``model`` → assistant (``thought`` text parts →
``reasoning_content``, ``functionCall`` parts → ``tool_calls``), ``user`` (or the legacy ``function``) →
user text and, for ``functionResponse`` parts, ``tool`` messages; consecutive contents of one role are one
turn (a streamed answer comes back as one content per chunk) and a model turn's text parts are joined as
they were generated. A function response without an ``id`` takes the id of the open call of that name, so
every result is paired with its call. ``inlineData`` / ``fileData`` become ``[image]`` / ``[file]``
placeholders; server-side tool parts (``executableCode`` …) are a 400 naming them.
"""

from __future__ import annotations

import json
from typing import Any

from .errors import ProxyError

__all__ = ["camel", "gemini_fields", "gemini_messages", "obj", "require"]

_DATA = ("text", "inlineData", "fileData", "functionCall", "functionResponse", "executableCode",
         "codeExecutionResult", "toolCall", "toolResponse")
_ROLES = {None: "user", "user": "user", "function": "user", "tool": "user", "model": "assistant"}


def require(cond: bool, message: str, param: str | None = None) -> None:
    if not cond:
        raise ProxyError(message, 400, param=param)


def camel(key: str) -> str:
    """``max_output_tokens`` → ``maxOutputTokens`` (camelCase keys are returned as they are)."""
    if "_" not in key:
        return key
    head, *rest = key.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


def obj(value: Any, param: str) -> dict[str, Any]:
    """``value`` as an object with camelCase keys (a 400 naming ``param`` when it is not an object)."""
    require(isinstance(value, dict), f"'{param}' must be an object", param)
    return value if not any("_" in k for k in value) else {camel(k): v for k, v in value.items()}


def gemini_fields(body: dict[str, Any]) -> dict[str, Any]:
    """The body's top-level fields and ``generationConfig.<field>`` entries, camelCased."""
    top = obj(body, "body")
    out = dict(top)
    gen = top.get("generationConfig")
    if gen is not None:
        for k, v in obj(gen, "generationConfig").items():
            out["generationConfig." + k] = v
    return out


def _system(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    c = obj(value, "systemInstruction")
    parts = c.get("parts")
    require(isinstance(parts, list), "'systemInstruction.parts' must be a list", "systemInstruction.parts")
    texts = []
    for i, part in enumerate(parts):
        t = obj(part, f"systemInstruction.parts[{i}]").get("text")
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
        c = obj(c, p)
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
            self.part(obj(part, f"{p}.parts[{j}]"), f"{p}.parts[{j}]")

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
            self.call(obj(part[key], f"{p}.functionCall"), f"{p}.functionCall")
        elif key == "functionResponse" and self.role == "user":
            self.result(obj(part[key], f"{p}.functionResponse"), f"{p}.functionResponse")
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
            sub = obj(sub, f"{p}.parts[{j}]")
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
    the proxy rendered it; raises :class:`~openforge.core.errors.ProxyError` for a body it would refuse."""
    flat = gemini_fields(body)
    return _messages(flat.get("contents"), _system(flat.get("systemInstruction")))
