"""ATIF documents read as openforge trajectories (for ``forge export sft --from ATIF_DIR``).

Owns: :func:`from_atif`, :func:`read_atif`, :func:`is_atif`, :func:`iter_atif` and :func:`find_atif`. No dependency on the
``harbor`` package: the fields read are checked here, and a document that lacks them is refused with its
path and the field.

Two kinds of document:

- **openforge's own** (``extra.openforge.trajectory`` at the root): the trajectory is rebuilt exactly — its
  calls from the agent steps (ids and logprobs from ``metrics``, the rest from ``extra.openforge.call``),
  everything else from the root — and its training segments are checked against the calls, so a token SFT
  export of it equals the export of the original, token for token.
- **another framework's**: each non-copied ``agent`` step becomes a call whose request is the conversation
  before it (system/user steps, earlier agent turns with their tool calls, observations as tool results).
  A step whose ``metrics`` carry ``prompt_token_ids`` and ``completion_token_ids`` is an exact call (its
  ``logprobs`` when given, else 0.0 — SFT does not read them); one without is a text call (``exact: false``),
  which a token export re-renders with the policy's chat template. The reward is the root's
  ``extra.reward`` or, for a Harbor trial directory (``<trial>/agent/trajectory.json``), the trial's
  ``result.json`` / ``verifier/reward.txt``; without one the trajectory is kept with reward 0 and
  ``metadata.atif.reward == "unknown"``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..core.errors import StoreError
from ..core.trajectory import Trajectory, validate_segments
from ..core.types import ModelCall, RolloutStatus
from .export import OPENFORGE_KEY

__all__ = ["find_atif", "from_atif", "is_atif", "iter_atif", "read_atif"]

_SKIP_DIRS = {".git", "node_modules", "__pycache__"}


def is_atif(doc: Any) -> bool:
    return isinstance(doc, dict) and str(doc.get("schema_version", "")).startswith("ATIF-")


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise StoreError(f"{path}: not readable as JSON ({e})") from None


def iter_atif(root: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """(path, document) of the ATIF documents at ``root``: the file itself, or every ``*.json`` below the
    directory whose ``schema_version`` says ATIF (other JSON files are passed over), in path order."""
    if root.is_file():
        doc = _load(root)
        if is_atif(doc):
            yield root, doc
        return
    for p in sorted(root.rglob("*.json")):
        if _SKIP_DIRS & set(p.relative_to(root).parts) or not p.is_file():
            continue
        try:
            doc = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            continue
        if is_atif(doc):
            yield p, doc


def find_atif(root: Path) -> list[Path]:
    """The paths of the ATIF documents at ``root`` (see :func:`iter_atif`)."""
    return [p for p, _ in iter_atif(root)]


def _need(cond: bool, where: str, what: str) -> None:
    if not cond:
        raise StoreError(f"{where}: {what}")


def _all_docs(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield doc
    for sub in doc.get("subagent_trajectories") or []:
        if isinstance(sub, dict):
            yield from _all_docs(sub)


# ------------------------------------------------------------------------------ openforge's own


def _own_call(step: dict[str, Any], where: str) -> ModelCall:
    rec = dict(step["extra"][OPENFORGE_KEY]["call"])
    metrics = step.get("metrics") or {}
    if rec.get("exact", True) and "prompt_ids" not in rec:
        rec["prompt_ids"] = metrics.get("prompt_token_ids") or []
        rec["output_ids"] = metrics.get("completion_token_ids") or []
        rec["output_logprobs"] = metrics.get("logprobs") or []
    try:
        return ModelCall.model_validate(rec)
    except ValueError as e:
        raise StoreError(f"{where}: step {step.get('step_id')}: extra.openforge.call is not a recorded call: {e}") from None


def _own(doc: dict[str, Any], where: str) -> Trajectory:
    calls = []
    for d in _all_docs(doc):
        for step in d.get("steps") or []:
            if isinstance(step, dict) and isinstance((step.get("extra") or {}).get(OPENFORGE_KEY), dict) \
                    and "call" in step["extra"][OPENFORGE_KEY]:
                calls.append(_own_call(step, where))
    record = doc["extra"][OPENFORGE_KEY]["trajectory"]
    try:
        traj = Trajectory.model_validate({**record, "calls": sorted(calls, key=lambda c: c.index)})
        validate_segments(traj.calls, traj.segments)
    except ValueError as e:  # SegmentValidationError too: the document was edited inconsistently
        raise StoreError(f"{where}: the openforge record does not match the steps' calls: {e}") from None
    return traj


# ------------------------------------------------------------------------------ another framework's


def _text(content: Any) -> str:
    """A message or observation as text (content parts: their text; images and audio: a placeholder)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text") or "" if p.get("type") == "text" else f"[{p.get('type')}]"
                       for p in content if isinstance(p, dict))
    return ""


def _openai_tool_calls(step: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"id": str(tc.get("tool_call_id") or f"call_{j}"), "type": "function",
             "function": {"name": str(tc.get("function_name") or ""),
                          "arguments": json.dumps(tc.get("arguments") or {}, ensure_ascii=False)}}
            for j, tc in enumerate(step.get("tool_calls") or []) if isinstance(tc, dict)]


def _assistant(step: dict[str, Any]) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": _text(step.get("message"))}
    tcs = _openai_tool_calls(step)
    if tcs:
        msg["tool_calls"] = tcs
    return msg


def _observations(step: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for r in (step.get("observation") or {}).get("results") or []:
        if not isinstance(r, dict) or r.get("content") is None:
            continue  # a sub-agent reference without content: nothing the model read
        text = _text(r["content"])
        if r.get("source_call_id"):
            out.append({"role": "tool", "tool_call_id": str(r["source_call_id"]), "content": text})
        else:
            out.append({"role": "user", "content": text})
    return out


def _foreign_call(index: int, step: dict[str, Any], messages: list[dict[str, Any]],
                  tools: list[dict[str, Any]] | None, model: str | None) -> ModelCall:
    resp = {"text": _text(step.get("message")), "reasoning": step.get("reasoning_content"),
            "tool_calls": [{"id": tc["id"], "name": tc["function"]["name"], "arguments": tc["function"]["arguments"]}
                           for tc in _openai_tool_calls(step)],
            "finish_reason": "tool_calls" if step.get("tool_calls") else "stop"}
    req: dict[str, Any] = {"model": step.get("model_name") or model or "unknown", "messages": list(messages)}
    if tools:
        req["tools"] = tools
    metrics = step.get("metrics") or {}
    prompt, output = metrics.get("prompt_token_ids"), metrics.get("completion_token_ids")
    exact = isinstance(prompt, list) and isinstance(output, list) and bool(output)
    logprobs = metrics.get("logprobs") if exact else None
    if exact and not (isinstance(logprobs, list) and len(logprobs) == len(output)):
        logprobs = [0.0] * len(output)
    return ModelCall(index=index, api="chat", request=req, response=resp, exact=exact,
                     prompt_ids=list(prompt) if exact else [], output_ids=list(output) if exact else [],
                     output_logprobs=list(logprobs or []), model=step.get("model_name") or model,
                     finish_reason=resp["finish_reason"])


def _foreign_calls(doc: dict[str, Any], first_index: int, where: str) -> list[ModelCall]:
    agent = doc.get("agent") or {}
    tools, model = agent.get("tool_definitions"), agent.get("model_name")
    steps = doc.get("steps")
    _need(isinstance(steps, list) and bool(steps), where, "'steps' must be a non-empty list")
    messages: list[dict[str, Any]] = []
    calls: list[ModelCall] = []
    for i, step in enumerate(steps):
        _need(isinstance(step, dict) and step.get("source") in ("system", "user", "agent"), where,
              f"steps[{i}].source must be one of system, user, agent")
        if step["source"] == "agent":
            if not step.get("is_copied_context") and step.get("llm_call_count") != 0:
                calls.append(_foreign_call(first_index + len(calls), step, messages, tools, model))
            messages.append(_assistant(step))
        elif step.get("message") not in (None, ""):
            messages.append({"role": step["source"], "content": _text(step.get("message"))})
        messages.extend(_observations(step))
    return calls


def _harbor_reward(path: Path) -> float | None:
    """The reward of the Harbor trial a ``<trial>/agent/*.json`` trajectory belongs to."""
    if path.parent.name != "agent":
        return None
    trial = path.parent.parent
    try:
        res = json.loads((trial / "result.json").read_text())
        rewards = (res.get("verifier_result") or {}).get("rewards") or {}
        if rewards:
            return float(rewards.get("reward", next(iter(rewards.values()))))
    except (OSError, ValueError, AttributeError, TypeError):
        pass
    try:
        return float((trial / "verifier" / "reward.txt").read_text().strip())
    except (OSError, ValueError):
        return None


def _foreign(doc: dict[str, Any], path: Path, where: str) -> Trajectory:
    calls: list[ModelCall] = []
    for d in _all_docs(doc):
        calls += _foreign_calls(d, len(calls), where)
    extra = doc.get("extra") if isinstance(doc.get("extra"), dict) else {}
    reward = extra.get("reward")
    reward = float(reward) if isinstance(reward, (int, float)) and not isinstance(reward, bool) else _harbor_reward(path)
    agent = doc.get("agent") or {}
    rid = str(doc.get("trajectory_id") or doc.get("session_id") or path.stem)
    meta = {"atif": {"path": str(path), "schema_version": doc.get("schema_version"), "agent": agent.get("name"),
                     "agent_version": agent.get("version"), "session_id": doc.get("session_id"),
                     "reward": "recorded" if reward is not None else "unknown",
                     "token_ids": "recorded" if calls and all(c.exact for c in calls) else "absent"}}
    for k in ("split", "heldout"):
        if k in extra:
            meta[k] = extra[k]
    status = RolloutStatus.SUCCESS if reward is not None and reward > 0 else RolloutStatus.POLICY_FAILURE
    traj = Trajectory(rollout_id=rid, task_id=str(extra.get("task_id") or rid), harness=agent.get("name"),
                      environment="atif", status=status, reward=reward or 0.0, calls=calls, metadata=meta)
    return traj.build()


# ------------------------------------------------------------------------------ entry points


def from_atif(doc: dict[str, Any], path: Path | str = "<atif>") -> Trajectory:
    """One ATIF document (a parsed dict) as an openforge trajectory; ``path`` names it in errors and locates a
    Harbor trial's reward."""
    path = Path(path)
    where = str(path)
    _need(is_atif(doc), where, "not an ATIF document (no 'schema_version' starting with 'ATIF-')")
    extra = doc.get("extra")
    if isinstance(extra, dict) and isinstance(extra.get(OPENFORGE_KEY), dict) and "trajectory" in extra[OPENFORGE_KEY]:
        return _own(doc, where)
    return _foreign(doc, path, where)


def read_atif(source: Path) -> list[Trajectory]:
    """Every ATIF document at ``source`` (a file, or a directory searched recursively) as a trajectory.
    Two documents of one rollout id: the second gets its path appended, so neither replaces the other."""
    out, seen = [], set()
    for p, doc in iter_atif(source):
        t = from_atif(doc, p)
        if t.rollout_id in seen:
            t = t.model_copy(update={"rollout_id": f"{t.rollout_id}@{p}"})
        seen.add(t.rollout_id)
        out.append(t)
    if not out:
        raise StoreError(f"{source}: no ATIF document here (a .json file whose schema_version starts with 'ATIF-')")
    return out
