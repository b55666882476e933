"""openforge trajectories written as ATIF-v1.7 documents (Agent Trajectory Interchange Format, Harbor RFC 0001).

Owns: :func:`to_atif`, :func:`harness_version` and :data:`ATIF_VERSION`. Pure: a trajectory in, a JSON-ready
dict out; no dependency on the ``harbor`` package.

One document per trajectory. ``agent`` is the harness (name and version). The main agent's conversation
gives ``steps``: system and user messages as ``system``/``user`` steps, each recorded model call as one
``agent`` step (its text, reasoning, tool calls, and in ``metrics`` the exact prompt and completion token ids
and logprobs), tool results as the ``observation`` of the agent step whose tool call they answer. Other
agents of the rollout (sub-agents: a new lineage) are embedded in ``subagent_trajectories`` and referenced from
the main agent's step that was running when they started.

Nothing is lost: every call's recorded fields (wire request, canonical response, status, timings, sampling,
``exact`` ...) are in the step's ``extra.openforge.call``, and the trajectory's own fields (status, reward,
named rewards, training segments, metrics, metadata) in the root's ``extra.openforge``; :func:`from_atif
<openforge.atif.importer.from_atif>` rebuilds the trajectory from them exactly.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from ..core.trajectory import Trajectory
from ..core.types import ModelCall
from .conversation import Agent, ParsedCall, assistant_message, extends, group_agents

__all__ = ["ATIF_VERSION", "OPENFORGE_KEY", "harness_version", "to_atif"]

ATIF_VERSION = "ATIF-v1.7"
#: The key under every ``extra`` that holds what openforge recorded beyond ATIF's own fields.
OPENFORGE_KEY = "openforge"
_IDS = ("prompt_ids", "output_ids", "output_logprobs")


def harness_version(traj: Trajectory) -> tuple[str, str]:
    """(version, where it came from) of the harness that recorded ``traj``: the trajectory's own
    ``metadata.harness_version``, else the version openforge pins for a CLI harness, else openforge's own
    version (a harness that ships with openforge, or a user's)."""
    from .. import __version__
    from ..harnesses.versions import NPM_PINS, PYPI_PINS

    recorded = (traj.metadata or {}).get("harness_version")
    if isinstance(recorded, str) and recorded:
        return recorded, "recorded"
    name = traj.harness or ""
    if name in NPM_PINS:
        return NPM_PINS[name].version, f"pinned ({NPM_PINS[name].spec})"
    if name in PYPI_PINS:
        return PYPI_PINS[name].partition("==")[2] or __version__, f"pinned ({PYPI_PINS[name]})"
    return __version__, "openforge"


def _iso(ts: float) -> str | None:
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat() if ts > 0 else None


def _tool_call(tc: dict[str, Any], call_index: int, j: int) -> dict[str, Any]:
    from ..proxy.canonical import parse_arguments

    raw = tc.get("arguments")
    args = parse_arguments(raw)
    out: dict[str, Any] = {"tool_call_id": tc.get("id") or f"call-{call_index}-{j}",
                           "function_name": str(tc.get("name") or ""), "arguments": args if isinstance(args, dict) else {}}
    if not isinstance(args, dict):  # not a JSON object (free-form input, malformed JSON): kept as written
        out["extra"] = {"raw_arguments": raw if isinstance(raw, str) else repr(raw)}
    return out


def _call_record(call: ModelCall) -> dict[str, Any]:
    """The call's fields that ATIF has no place for; exact ids and logprobs live in ``metrics``."""
    return call.model_dump(mode="json", exclude=set(_IDS) if call.exact else None)


def _agent_step(call: ModelCall) -> dict[str, Any]:
    resp = call.response or {}
    step: dict[str, Any] = {"source": "agent", "message": resp.get("text") or "", "llm_call_count": 1,
                            "extra": {OPENFORGE_KEY: {"call": _call_record(call)}}}
    if ts := _iso(call.started_at):
        step["timestamp"] = ts
    if call.model:
        step["model_name"] = call.model
    if resp.get("reasoning"):
        step["reasoning_content"] = resp["reasoning"]
    if resp.get("tool_calls"):
        step["tool_calls"] = [_tool_call(tc, call.index, j) for j, tc in enumerate(resp["tool_calls"])]
    metrics: dict[str, Any] = {"prompt_tokens": len(call.prompt_ids), "completion_tokens": len(call.output_ids)}
    if call.exact:  # ids computed after the fact (a text-only teacher) are not the policy's: extra only
        metrics.update(prompt_token_ids=list(call.prompt_ids), completion_token_ids=list(call.output_ids))
        if call.output_logprobs:
            metrics["logprobs"] = list(call.output_logprobs)
    step["metrics"] = metrics
    return step


def _history_step(m: dict[str, Any]) -> dict[str, Any]:
    """A message of the request that no recorded call of this agent produced (a system prompt, the user's
    turn, an assistant turn the harness wrote or rewrote)."""
    role = m.get("role")
    content = m.get("content") if isinstance(m.get("content"), str) else ""
    if role == "assistant":
        step: dict[str, Any] = {"source": "agent", "message": content, "is_copied_context": True}
        if m.get("reasoning_content"):
            step["reasoning_content"] = m["reasoning_content"]
        if m.get("tool_calls"):
            step["tool_calls"] = [_tool_call({"id": tc.get("id"), "name": tc["function"]["name"],
                                              "arguments": tc["function"].get("arguments")}, -1, j)
                                  for j, tc in enumerate(m["tool_calls"])]
        return step
    return {"source": "system" if role == "system" else "user", "message": content}


def _observe(steps: list[dict[str, Any]], m: dict[str, Any]) -> None:
    """A tool result as the observation of the step that made its tool call (linked by ``source_call_id``), or
    of the latest step when no step made it."""
    if not steps:
        steps.append({"source": "system", "message": ""})
    result: dict[str, Any] = {"content": m.get("content") if isinstance(m.get("content"), str) else ""}
    call_id = m.get("tool_call_id")
    step = next((s for s in reversed(steps) if call_id and any(tc["tool_call_id"] == call_id
                                                                 for tc in s.get("tool_calls") or [])), None)
    if step is not None:
        result["source_call_id"] = call_id
    (step or steps[-1]).setdefault("observation", {"results": []})["results"].append(result)


def _new_messages(prev: ParsedCall | None, pc: ParsedCall) -> tuple[list[dict[str, Any]], dict[str, Any] | None, bool]:
    """The messages ``pc``'s request adds to the conversation so far, the previous answer as the harness sent it
    back (None when it did not), and whether the history was rewritten."""
    msgs = pc.messages or []
    if prev is None or prev.messages is None:
        return msgs, None, False
    if extends(prev.messages, msgs):
        new = msgs[len(prev.messages):]
        answer = assistant_message(prev.call)
        if new and new[0].get("role") == "assistant" and extends([answer], new[:1]):
            return new[1:], new[0], False
        return new, None, False
    return msgs, None, True


def _adopt_wire_ids(step: dict[str, Any], echo: dict[str, Any]) -> None:
    """Name the step's tool calls by the ids the harness saw (and sends back with their results): a wire API
    may carry other ids than the proxy recorded (Messages: ``toolu_…`` for ``call_…``)."""
    tcs, sent = step.get("tool_calls") or [], echo.get("tool_calls") or []
    if len(tcs) != len(sent) or step.get("observation"):
        return
    for tc, s in zip(tcs, sent):
        wire_id = s.get("id")
        if wire_id and wire_id != tc["tool_call_id"] and s.get("function", {}).get("name") == tc["function_name"]:
            tc.setdefault("extra", {})["recorded_id"] = tc["tool_call_id"]
            tc["tool_call_id"] = wire_id


def _steps(agent: Agent) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = []
    prev: ParsedCall | None = None
    for pc in agent.calls:
        new, echo, rewritten = _new_messages(prev, pc)
        if echo is not None and steps and steps[-1]["source"] == "agent":
            _adopt_wire_ids(steps[-1], echo)
        for m in new:
            if m.get("role") == "tool":
                _observe(steps, m)
            else:
                steps.append(_history_step(m))
        step = _agent_step(pc.call)
        if rewritten:
            step["extra"][OPENFORGE_KEY]["history_rewritten"] = True
        steps.append(step)
        if pc.messages is not None:
            prev = pc
    for i, s in enumerate(steps, 1):
        s["step_id"] = i
    return steps


def _final_metrics(steps: list[dict[str, Any]]) -> dict[str, Any]:
    calls = [s for s in steps if s.get("metrics")]
    return {"total_prompt_tokens": sum(s["metrics"]["prompt_tokens"] for s in calls),
            "total_completion_tokens": sum(s["metrics"]["completion_tokens"] for s in calls),
            "total_steps": len(steps)}


def _agent_doc(traj: Trajectory, agent: Agent, n: int, version: tuple[str, str]) -> dict[str, Any]:
    steps = _steps(agent)
    tools = next((pc.tools for pc in agent.calls if pc.tools), None)
    model = next((pc.call.model for pc in agent.calls if pc.call.model), None)
    info: dict[str, Any] = {"name": traj.harness or "unknown", "version": version[0],
                            "extra": {"version_source": version[1], "agent_index": n}}
    if model:
        info["model_name"] = model
    if tools:
        info["tool_definitions"] = tools
    doc: dict[str, Any] = {"schema_version": ATIF_VERSION, "session_id": traj.rollout_id,
                           "trajectory_id": traj.rollout_id if n == 0 else f"{traj.rollout_id}/agent-{n}",
                           "agent": info, "steps": steps, "final_metrics": _final_metrics(steps)}
    return doc


def _link(main: dict[str, Any], sub: dict[str, Any], sub_agent: Agent) -> None:
    """Reference ``sub`` from the main agent's step that was running when its first call came (the latest
    main-agent call before it): on the observation of that step's tool call, the delegation."""
    start = sub_agent.first_index
    owner = None
    for s in main["steps"]:
        call = s.get("extra", {}).get(OPENFORGE_KEY, {}).get("call")
        if call is not None and call["index"] < start:
            owner = s
    owner = owner or main["steps"][0]
    ref = {"trajectory_id": sub["trajectory_id"], "session_id": sub["session_id"]}
    results = owner.setdefault("observation", {"results": []})["results"]
    tc_ids = [tc["tool_call_id"] for tc in owner.get("tool_calls") or []]
    target = next((r for r in results if r.get("source_call_id") in tc_ids and r.get("source_call_id")), None)
    if target is None:
        target = {"source_call_id": tc_ids[-1]} if tc_ids else {}
        results.append(target)
    target.setdefault("subagent_trajectory_ref", []).append(ref)


def to_atif(traj: Trajectory) -> dict[str, Any]:
    """``traj`` as one ATIF-v1.7 document (a dict ready for ``json.dumps``)."""
    version = harness_version(traj)
    agents = group_agents(traj.calls)
    if agents:
        docs = [_agent_doc(traj, a, n, version) for n, a in enumerate(agents)]
    else:  # no model call was recorded: ATIF needs a step, so the document says why there is none
        why = f"the rollout recorded no model call (status {traj.status}{': ' + traj.error if traj.error else ''})"
        docs = [{"schema_version": ATIF_VERSION, "session_id": traj.rollout_id, "trajectory_id": traj.rollout_id,
                 "agent": {"name": traj.harness or "unknown", "version": version[0],
                           "extra": {"version_source": version[1], "agent_index": 0}},
                 "steps": [{"step_id": 1, "source": "system", "message": why}]}]
    main = docs[0]
    for sub, agent in zip(docs[1:], agents[1:]):
        _link(main, sub, agent)
    if docs[1:]:
        main["subagent_trajectories"] = docs[1:]
    record = traj.model_dump(mode="json", exclude={"calls"})
    main["extra"] = {"task_id": traj.task_id, "status": str(traj.status), "reward": traj.reward,
                     "rewards": dict(traj.rewards), OPENFORGE_KEY: {"trajectory": record}}
    main["notes"] = (f"Exported by openforge from rollout {traj.rollout_id} ({traj.environment or 'unknown'} "
                     f"environment, task {traj.task_id}). One agent step per recorded model call; exact token ids "
                     "and logprobs in step metrics; openforge's own record of each call in step "
                     "extra.openforge.call and of the rollout (status, rewards, training segments) in "
                     "extra.openforge.trajectory.")
    return main
