"""Hand-made trajectories in the wire shapes the proxy records (chat, responses, messages)."""

from __future__ import annotations

import json
from typing import Any

from openforge.trajectory import Trajectory
from openforge.types import ModelCall

# A step: (tool name, arguments, result text) or (name, args, result, is_error flag for messages).
Step = tuple[Any, ...]


def _chat_calls(steps: list[Step], final: str) -> list[ModelCall]:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "do the task"}]
    calls = []
    for i, st in enumerate([*steps, None]):
        req = {"model": "m", "messages": list(msgs)}
        if st is None:
            resp = {"choices": [{"message": {"role": "assistant", "content": final}, "finish_reason": "stop"}]}
        else:
            name, args, result = st[0], st[1], st[2]
            tc = {"id": f"call_{i}", "type": "function",
                  "function": {"name": name, "arguments": json.dumps(args)}}
            resp = {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [tc]},
                                 "finish_reason": "tool_calls"}]}
            msgs += [{"role": "assistant", "content": None, "tool_calls": [tc]}]
            if result is not None:
                msgs.append({"role": "tool", "tool_call_id": f"call_{i}", "content": result})
        calls.append(ModelCall(index=i, api="chat", request=req, response=resp,
                               prompt_ids=list(range(10 + 5 * i)), output_ids=[1, 2, 3],
                               output_logprobs=[-0.1] * 3, started_at=100.0 + i, latency_s=0.5))
    return calls


def _responses_calls(steps: list[Step], final: str) -> list[ModelCall]:
    items: list[dict[str, Any]] = [{"role": "user", "content": "do the task"}]
    calls = []
    for i, st in enumerate([*steps, None]):
        req = {"model": "m", "input": list(items)}
        if st is None:
            resp = {"output": [{"type": "message", "role": "assistant",
                                "content": [{"type": "output_text", "text": final}]}]}
        else:
            name, args, result = st[0], st[1], st[2]
            if isinstance(args, str):  # freeform custom tool (codex apply_patch)
                item = {"type": "custom_tool_call", "call_id": f"call_{i}", "name": name, "input": args}
                out_type = "custom_tool_call_output"
            else:
                item = {"type": "function_call", "call_id": f"call_{i}", "name": name, "arguments": json.dumps(args)}
                out_type = "function_call_output"
            resp = {"output": [item]}
            items.append(item)
            if result is not None:
                items.append({"type": out_type, "call_id": f"call_{i}", "output": result})
        calls.append(ModelCall(index=i, api="responses", request=req, response=resp,
                               prompt_ids=list(range(10 + 5 * i)), output_ids=[1, 2],
                               output_logprobs=[-0.2] * 2, started_at=100.0 + i, latency_s=0.5))
    return calls


def _messages_calls(steps: list[Step], final: str) -> list[ModelCall]:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "do the task"}]
    calls = []
    for i, st in enumerate([*steps, None]):
        req = {"model": "m", "messages": list(msgs)}
        if st is None:
            resp = {"content": [{"type": "text", "text": final}], "stop_reason": "end_turn"}
        else:
            name, args, result = st[0], st[1], st[2]
            block = {"type": "tool_use", "id": f"toolu_{i}", "name": name, "input": args}
            resp = {"content": [block], "stop_reason": "tool_use"}
            msgs.append({"role": "assistant", "content": [block]})
            if result is not None:
                res = {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": result}
                if len(st) > 3:
                    res["is_error"] = st[3]
                msgs.append({"role": "user", "content": [res]})
        calls.append(ModelCall(index=i, api="messages", request=req, response=resp,
                               prompt_ids=list(range(10 + 5 * i)), output_ids=[1, 2, 3, 4],
                               output_logprobs=[-0.3] * 4, started_at=100.0 + i, latency_s=0.5))
    return calls


BUILDERS = {"chat": _chat_calls, "responses": _responses_calls, "messages": _messages_calls}


def traj(
    steps: list[Step],
    *,
    api: str = "chat",
    status: str = "success",
    reward: float | None = None,
    task_id: str = "t1",
    rollout_id: str = "r1",
    final: str = "done",
    **kw: Any,
) -> Trajectory:
    calls = BUILDERS[api](steps, final)
    if reward is None:
        reward = 1.0 if status == "success" else 0.0
    return Trajectory(rollout_id=rollout_id, task_id=task_id, status=status, reward=reward, calls=calls, **kw)
