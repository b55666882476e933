"""Who made each model call of a rollout: the harness, or another process in its sandbox.

Owns: :func:`label_origins`, :data:`Origin`, :data:`TrainCalls`.

Every process in a rollout's sandbox can reach the proxy: CLI harnesses hand their own environment
(``OPENAI_BASE_URL``, the rollout's key) to the tools they run, so a tool script the policy wrote can
call the policy too, and the proxy cannot tell that call's credential from the harness's. Such a call
would be trained with the rollout's reward as if the harness had made it. So each call is labelled
from what the harness's own calls look like (``ModelCall.origin``):

``harness``
    * the rollout's first call (a tool can only run after the harness asked the model for it);
    * a call whose prompt continues a harness call (it starts with that call's prompt: the same
      conversation, a turn later), or branches from one inside its *agent prefix*: the same system
      prompt and tools, token for token (``system_prefix_len`` — a retry, a rewritten or compacted
      history of the same agent);
    * a call that declares tools: an agent loop of its own, as a harness's sub-agents are (Claude
      Code's ``Task``, OpenClaw's spawned sessions, a lead delegating to a worker with other tools);
    * every call, when the first call has no agent prefix and declares no tools: then there is
      nothing to tell the harness by.

``foreign``
    everything else: a fresh conversation that declares no tools and whose system prompt is not the
    harness's (a script calling ``$OPENAI_BASE_URL`` with its own messages; also a harness's own side
    call of that shape, such as a title generator's, which ``all`` trains).

What this guarantees: a process that calls the model with a completion of its own — its own system
prompt, or none, no tools, not continuing a harness conversation — is labelled ``foreign``. What it
does not: a process that declares a tool, copies the harness's system prompt and tools, or replays
the harness's conversation (the policy has seen them in its context, so a tool script it writes can)
is labelled ``harness``. The proxy cannot do better from the calls alone: tools inherit the harness's
environment (its URL and key), so no credential tells them apart. The label is a data-quality filter
against accidental credit, not a security boundary.

``rollout.train_calls`` (:data:`TrainCalls`) says what is trained: ``harness`` (the default) skips
``foreign`` calls when segments are built (``skipped_calls`` says ``foreign``), ``all`` trains them.
Pure functions, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal

from .types import ModelCall

__all__ = ["ORIGINS", "TRAIN_CALLS", "Origin", "TrainCalls", "check_train_calls", "label_origins", "tool_names"]

Origin = Literal["harness", "foreign"]
TrainCalls = Literal["harness", "all"]
ORIGINS: tuple[Origin, ...] = ("harness", "foreign")
TRAIN_CALLS: tuple[TrainCalls, ...] = ("harness", "all")


def check_train_calls(value: object) -> TrainCalls:
    """``value`` as a :data:`TrainCalls`, or a :class:`~openforge.core.errors.ConfigError` naming the choices."""
    from .errors import ConfigError

    if value not in TRAIN_CALLS:
        raise ConfigError(f"rollout.train_calls must be one of {', '.join(TRAIN_CALLS)}, got {value!r}")
    return value  # type: ignore[return-value]


def tool_names(request: dict[str, Any]) -> frozenset[str]:
    """The names of the tools a request declares, on any wire: chat ``tools[].function.name`` (and the
    old ``functions[].name``), Responses/Messages ``tools[].name`` (a built-in tool by its ``type``),
    Gemini ``tools[].functionDeclarations[].name``."""
    out: set[str] = set()
    tools = request.get("tools") if isinstance(request, dict) else None
    for t in [*(tools if isinstance(tools, list) else []), *_as_list(request.get("functions"))]:
        if not isinstance(t, dict):
            continue
        fn = t.get("function")
        name = fn.get("name") if isinstance(fn, dict) else t.get("name")
        if isinstance(name, str) and name:
            out.add(name)
        elif isinstance(t.get("type"), str) and t["type"] != "function":
            out.add(f"type:{t['type']}")
        for key in ("functionDeclarations", "function_declarations"):
            out |= {d["name"] for d in _as_list(t.get(key)) if isinstance(d, dict) and isinstance(d.get("name"), str)}
    return frozenset(out)


def _as_list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def _prefix(call: ModelCall) -> tuple[int, ...] | None:
    """The call's agent prefix (system prompt and tools as tokens), when the renderer measured one."""
    n = call.system_prefix_len or 0
    return tuple(call.prompt_ids[:n]) if 0 < n <= len(call.prompt_ids) else None


def _continues(prompt: list[int], earlier: Sequence[list[int]]) -> bool:
    """``prompt`` starts with one of ``earlier`` (O(1) probes first, then one C-level slice compare)."""
    for e in earlier:
        n = len(e)
        if 0 < n <= len(prompt) and prompt[n - 1] == e[-1] and prompt[n >> 1] == e[n >> 1] and prompt[:n] == e:
            return True
    return False


def label_origins(calls: Iterable[ModelCall]) -> dict[int, Origin]:
    """``{call index: origin}`` for every call (see the module docstring for the rule)."""
    ordered = sorted(calls, key=lambda c: c.index)
    if not ordered:
        return {}
    first = ordered[0]
    if _prefix(first) is None and not tool_names(first.request):
        return {c.index: "harness" for c in ordered}  # nothing to tell the harness by
    prefixes: set[tuple[int, ...]] = set()
    prompts: list[list[int]] = []
    out: dict[int, Origin] = {}
    for i, call in enumerate(ordered):
        own = tool_names(call.request)
        prefix = _prefix(call)
        harness = (i == 0 or bool(own) or (prefix is not None and prefix in prefixes)
                   or _continues(call.prompt_ids, prompts))
        out[call.index] = "harness" if harness else "foreign"
        if harness:
            if prefix is not None:
                prefixes.add(prefix)
            if call.prompt_ids:
                prompts.append(list(call.prompt_ids))
    return out
