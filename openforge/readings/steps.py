"""Tool-call extraction: recorded model calls → a normalised list of agent steps.

Owns: :class:`ToolStep`, :func:`extract_steps`, :func:`is_error_result`, :func:`shell_command`
and the generic-shell tool list. Pure functions over the wire JSON the proxy recorded in
``ModelCall.request`` / ``ModelCall.response``, for the three wire APIs:

* chat (OpenAI Chat Completions): ``choices[0].message.tool_calls`` in the response; results are
  ``role: "tool"`` messages (``tool_call_id``) in later requests;
* responses (OpenAI Responses): ``function_call`` / ``custom_tool_call`` / ``local_shell_call``
  items in ``response.output``; results are ``*_output`` items (``call_id``) in later ``input``;
* messages (Anthropic Messages): ``tool_use`` blocks in ``response.content``; results are
  ``tool_result`` blocks (``tool_use_id``, ``is_error``) in later user messages;
* gemini (Gemini API): ``functionCall`` parts; results are ``functionResponse`` parts in later
  ``contents``, paired with their call by ``id`` or, without one, by name as the proxy pairs them
  (:func:`~openforge.core.gemini_contents.gemini_messages`).

browser-use calls no tools: its actions are a JSON answer ``{"action": [{"navigate": {...}}]}`` (chat)
or the input of one forced ``AgentOutput`` tool (messages); each action is read as a step.

The proxy records ``response`` in its canonical form (``{"text", "reasoning", "tool_calls": [{"id",
"name", "arguments"}], "finish_reason", ...}``, whatever the wire API); that form is read too.
A step's result is matched by call id; ids are compared after dropping every character that is
not a letter or digit and a leading ``call``/``toolu``/``fc``, because some harnesses (OpenClaw)
rewrite ``call_ab12`` as ``callab12`` and the Messages API carries the proxy's ``call_X`` as ``toolu_X``.
The exact definitions are in docs/metrics.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..core.errors import ProxyError
from ..core.gemini_contents import gemini_messages
from ..core.types import CallStatus, ModelCall

__all__ = [
    "CONTROL_TOOLS",
    "GENERIC_SHELL_TOOLS",
    "ToolStep",
    "extract_steps",
    "is_error_result",
    "shell_command",
]

# Tool names (lower-cased, namespace prefix removed) that run an arbitrary shell command.
GENERIC_SHELL_TOOLS = frozenset(
    {
        "bash", "shell", "sh", "exec", "exec_command", "local_shell", "run_command", "run_shell_command",
        "execute_command", "execute_bash", "terminal", "run_terminal_cmd", "shell_command",
        "powershell", "container.exec",
    }
)

# Tools that end the episode with an answer (react's ``finish``, browser-use's ``done``): the answer,
# not a use of a tool, so they are not steps.
CONTROL_TOOLS = frozenset({"finish", "final_answer", "done", "task_complete", "attempt_completion", "end_task"})

_SHELL_ARG_KEYS = ("command", "cmd", "script", "commands", "input", "code")


@dataclass(frozen=True)
class ToolStep:
    """One tool call the policy made, with the result the harness sent back (if any)."""

    index: int  # position among the rollout's steps, 0-based
    call_index: int  # the ModelCall whose response emitted it
    call_id: str | None
    name: str
    arguments: Any  # parsed JSON object when the arguments are JSON, else the raw string
    result: str | None = None  # None: no result was recorded (e.g. the rollout ended)
    error: bool = False
    api: str = "chat"

    @property
    def base_name(self) -> str:
        """Lower-cased tool name without a namespace prefix (``mcp__svc__list`` → ``list``)."""
        return base_tool_name(self.name)

    @property
    def is_shell(self) -> bool:
        return self.base_name in GENERIC_SHELL_TOOLS

    @property
    def command(self) -> str | None:
        """The shell command of a generic-shell step, else None."""
        return shell_command(self.arguments) if self.is_shell else None

    @property
    def args_text(self) -> str:
        """Canonical text of the arguments (sorted-key JSON, or the raw string)."""
        if isinstance(self.arguments, str):
            return self.arguments.strip()
        return json.dumps(self.arguments, sort_keys=True, ensure_ascii=False)

    @property
    def signature(self) -> tuple[str, str]:
        """(tool, arguments) identity: two steps with equal signatures did the same thing."""
        return (self.base_name, " ".join(self.args_text.split()))


def base_tool_name(name: str) -> str:
    n = name.strip().lower()
    for sep in ("__", "/"):
        if sep in n:
            n = n.rsplit(sep, 1)[-1]
    return n


def shell_command(arguments: Any) -> str | None:
    """The command string in a shell tool's arguments (``bash -lc X`` argv lists unwrap to ``X``)."""
    if isinstance(arguments, str):
        return arguments
    if isinstance(arguments, list):
        argv = [str(a) for a in arguments]
        if len(argv) >= 3 and argv[-2] in ("-c", "-lc") and argv[0].rsplit("/", 1)[-1] in ("bash", "sh", "zsh"):
            return argv[-1]
        return " ".join(argv)
    if isinstance(arguments, dict):
        for key in _SHELL_ARG_KEYS:
            if key in arguments:
                return shell_command(arguments[key])
    return None


# ------------------------------------------------------------------------------------------
# Result error detection
# ------------------------------------------------------------------------------------------

_EXIT_RE = re.compile(
    r"(?:exit(?:ed)?(?:\s+with)?\s+(?:code|status)|exit_code|exitcode|return\s*code|returncode)\W{0,3}(-?\d+)",
    re.IGNORECASE,
)
_ERROR_RES = [
    re.compile(r"^\s*(?:error|fatal)\b\s*[:!]", re.IGNORECASE | re.MULTILINE),
    re.compile(r"^\s*[\w.]*(?:Error|Exception)\b:", re.MULTILINE),
    re.compile(r"Traceback \(most recent call last\)"),
    re.compile(r"command not found|No such file or directory|Permission denied", re.IGNORECASE),
    re.compile(r"<tool_use_error>"),
]


def is_error_result(text: str | None, flag: bool | None = None) -> bool:
    """Whether a tool result reports a failure (definition: docs/metrics.md, "failed tool result").

    1. An explicit flag from the wire API (Anthropic ``is_error``) decides when present.
    2. Else an exit status in the text decides: the last ``exit code N`` / ``exit status N`` /
       ``exit_code: N`` / ``returncode N`` mention; non-zero is a failure.
    3. Else the text is a failure when it has a line starting ``Error:``/``fatal:``, an
       ``XxxError:``/``XxxException:`` line, a Python traceback, ``command not found``,
       ``No such file or directory``, ``Permission denied`` or ``<tool_use_error>``.
    """
    if flag is not None:
        return bool(flag)
    if not text:
        return False
    codes = _EXIT_RE.findall(text)
    if codes:
        return int(codes[-1]) != 0
    return any(r.search(text) for r in _ERROR_RES)


# ------------------------------------------------------------------------------------------
# Wire parsing
# ------------------------------------------------------------------------------------------


def _norm_id(call_id: Any) -> str | None:
    """Call ids compared without punctuation and without the ``call``/``toolu``/``fc`` prefix (the
    proxy answers the Messages API with ``toolu_X`` for its canonical ``call_X``)."""
    if call_id is None:
        return None
    s = re.sub(r"[^0-9A-Za-z]", "", str(call_id))
    for prefix in ("toolu", "call", "fc"):
        if s.startswith(prefix) and len(s) > len(prefix):
            s = s[len(prefix):]
            break
    return s or None


def _parse_args(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except (ValueError, TypeError):
            return raw
    return raw if raw is not None else {}


def _content_text(content: Any) -> str:
    """Text of a result payload: a string, a list of text/image parts, or a JSON object."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict):
                if "text" in part:
                    parts.append(str(part["text"]))
                elif part.get("type") in ("image", "input_image", "image_url"):
                    parts.append("[image]")
                elif "content" in part:
                    parts.append(_content_text(part["content"]))
        return "\n".join(parts)
    if isinstance(content, dict):
        if "text" in content:
            return str(content["text"])
        return json.dumps(content, ensure_ascii=False)
    return str(content)


def _unwrap_output(output: Any) -> tuple[str, bool | None]:
    """Responses ``*_output.output``: a string, parts, or JSON ``{"output", "metadata": {"exit_code"}}``."""
    text = _content_text(output)
    flag = None
    if isinstance(output, str) and output.lstrip().startswith("{"):
        try:
            obj = json.loads(output)
        except ValueError:
            obj = None
        if isinstance(obj, dict) and "output" in obj:
            text = _content_text(obj["output"])
            code = (obj.get("metadata") or {}).get("exit_code")
            if isinstance(code, int):
                flag = code != 0
    return text, flag


def _calls_in_response(call: ModelCall) -> list[tuple[str | None, str, Any]]:
    """(call_id, name, arguments) of every tool call in one recorded response."""
    resp = call.response or {}
    out: list[tuple[str | None, str, Any]] = []
    if isinstance(resp.get("tool_calls"), list):  # the proxy's canonical record (any wire API)
        for tc in resp["tool_calls"]:
            if isinstance(tc, dict):
                out.append((tc.get("id"), str(tc.get("name", "")), _parse_args(tc.get("arguments"))))
    if isinstance(resp.get("choices"), list):
        for choice in resp["choices"][:1]:
            msg = choice.get("message") or {}
            for tc in msg.get("tool_calls") or []:
                fn = tc.get("function") or {}
                out.append((tc.get("id"), str(fn.get("name", "")), _parse_args(fn.get("arguments"))))
            fc = msg.get("function_call")
            if fc:
                out.append((None, str(fc.get("name", "")), _parse_args(fc.get("arguments"))))
    if isinstance(resp.get("output"), list):
        for item in resp["output"]:
            if not isinstance(item, dict):
                continue
            kind = item.get("type")
            if kind == "function_call":
                out.append((item.get("call_id") or item.get("id"), str(item.get("name", "")),
                            _parse_args(item.get("arguments"))))
            elif kind == "custom_tool_call":
                out.append((item.get("call_id") or item.get("id"), str(item.get("name", "")), item.get("input", "")))
            elif kind == "local_shell_call":
                action = item.get("action") or {}
                out.append((item.get("call_id") or item.get("id"), "local_shell",
                            {"command": action.get("command", [])}))
    if isinstance(resp.get("content"), list):
        for block in resp["content"]:
            if isinstance(block, dict) and block.get("type") in ("tool_use", "server_tool_use"):
                out.append((block.get("id"), str(block.get("name", "")), block.get("input") or {}))
    if not out:  # browser-use over chat: the actions are the JSON answer itself
        out = [(None, n, a) for n, a in _agent_actions(_parse_args(_answer_text(resp)))]
    expanded: list[tuple[str | None, str, Any]] = []
    for cid, name, args in out:  # browser-use over messages: one forced AgentOutput tool holding the actions
        acts = _agent_actions(args) if name.lower() == "agentoutput" else []
        expanded += [(cid, n, a) for n, a in acts] if acts else [(cid, name, args)]
    return expanded


def _answer_text(resp: dict[str, Any]) -> str:
    if isinstance(resp.get("text"), str):
        return resp["text"]
    choices = resp.get("choices")
    if isinstance(choices, list) and choices and isinstance((choices[0].get("message") or {}).get("content"), str):
        return choices[0]["message"]["content"]
    return ""


def _agent_actions(obj: Any) -> list[tuple[str, Any]]:
    """browser-use's ``{"action": [{"navigate": {...}}, {"click": {...}}]}`` → (name, arguments) pairs."""
    if not isinstance(obj, dict) or not isinstance(obj.get("action"), list):
        return []
    return [next(iter(a.items())) for a in obj["action"] if isinstance(a, dict) and len(a) == 1]


def _results_in_request(request: dict[str, Any]) -> Iterable[tuple[str, str, bool | None]]:
    """(normalised call_id, result text, explicit error flag or None) of every tool result sent."""
    messages = request.get("messages") or []
    if "contents" in request:
        messages = _gemini_messages(request)
    for msg in messages:
        if not isinstance(msg, dict):
            continue
        if msg.get("role") == "tool":
            cid = _norm_id(msg.get("tool_call_id"))
            if cid:
                yield cid, _content_text(msg.get("content")), None
        content = msg.get("content")
        if isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    cid = _norm_id(block.get("tool_use_id"))
                    if cid:
                        flag = block.get("is_error")
                        yield cid, _content_text(block.get("content")), (bool(flag) if flag is not None else None)
    items = request.get("input")
    if isinstance(items, list):
        for item in items:
            if isinstance(item, dict) and str(item.get("type", "")).endswith("_call_output"):
                cid = _norm_id(item.get("call_id"))
                if cid:
                    text, flag = _unwrap_output(item.get("output"))
                    yield cid, text, flag


def _gemini_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    try:
        return gemini_messages(request)
    except ProxyError:
        return []


def extract_steps(calls: Iterable[ModelCall]) -> list[ToolStep]:
    """All tool calls of one rollout, in the order the policy made them, with their results.

    Calls are taken in ``index`` order; a call that failed at the proxy (status not ``ok``)
    emitted nothing. Episode-ending answer tools (:data:`CONTROL_TOOLS`) are not steps. A tool call's result is the first result with the same (normalised) id in
    any later request; a step with no such result has ``result=None`` and ``error=False``.
    """
    ordered = sorted(calls, key=lambda c: c.index)
    results: dict[str, tuple[str, bool | None]] = {}
    for call in ordered:
        for cid, text, flag in _results_in_request(call.request or {}):
            results.setdefault(cid, (text, flag))
    steps: list[ToolStep] = []
    for call in ordered:
        if call.status != CallStatus.OK:
            continue
        for call_id, name, args in _calls_in_response(call):
            if base_tool_name(name) in CONTROL_TOOLS:
                continue
            res = results.get(_norm_id(call_id) or "")
            text, flag = res if res is not None else (None, None)
            steps.append(
                ToolStep(
                    index=len(steps), call_index=call.index, call_id=call_id, name=name, arguments=args,
                    result=text, error=is_error_result(text, flag) if res is not None else False, api=call.api,
                )
            )
    return steps
