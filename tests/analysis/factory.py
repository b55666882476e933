"""Hand-made trajectories in the wire shapes the proxy records (chat, responses, messages)."""

from __future__ import annotations

import json
from typing import Any

from openforge.core.trajectory import Trajectory
from openforge.core.types import ModelCall

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


def to_canonical(resp: dict[str, Any]) -> dict[str, Any]:
    """The proxy's canonical record of a wire response: text, reasoning, tool_calls with call_ ids."""
    text, calls = "", []
    if "choices" in resp:
        msg = resp["choices"][0]["message"]
        text = msg.get("content") or ""
        calls = [(tc["id"], tc["function"]["name"], tc["function"]["arguments"]) for tc in msg.get("tool_calls") or []]
    elif "output" in resp:
        for it in resp["output"]:
            if it["type"] == "message":
                text = it["content"][0]["text"]
            else:
                calls.append((it["call_id"], it["name"], it.get("arguments", it.get("input"))))
    else:
        for b in resp["content"]:
            if b["type"] == "text":
                text = b["text"]
            else:  # the proxy's id is call_X; the Messages wire carried toolu_X
                calls.append(("call_" + b["id"][len("toolu_"):], b["name"], json.dumps(b["input"])))
    return {"text": text, "reasoning": None, "finish_reason": "tool_calls" if calls else "stop",
            "tool_calls": [{"id": i, "name": n, "arguments": a} for i, n, a in calls],
            "prompt_tokens": 7, "completion_tokens": 3}


def encode(text: str) -> list[int]:
    """A character-level stand-in tokenizer: token id = code point (``decode`` inverts it)."""
    return [ord(ch) for ch in text]


def decode(ids: list[int]) -> str:
    return "".join(chr(i) for i in ids)


def _with_ids(calls: list[ModelCall], steps: list[Step], final: str) -> list[ModelCall]:
    """Give the calls prefix-consistent token ids, as a renderer would: prompt i+1 = prompt i +
    output i + the tool result, so the calls form one segment."""
    prompt = encode("<|user|>do the task\n<|assistant|>")
    out = []
    for i, call in enumerate(calls):
        if i < len(steps):
            name, args, result = steps[i][0], steps[i][1], steps[i][2]
            gen = encode(f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>")
            added = encode(f"\n<|tool|>{result if result is not None else ''}\n<|assistant|>")
        else:
            gen, added = encode(final), []
        out.append(call.model_copy(update={
            "prompt_ids": list(prompt), "output_ids": gen, "output_logprobs": [-0.5] * len(gen),
        }))
        prompt = prompt + gen + added
    return out


def traj(
    steps: list[Step],
    *,
    api: str = "chat",
    status: str = "success",
    reward: float | None = None,
    task_id: str = "t1",
    rollout_id: str = "r1",
    final: str = "done",
    token_ids: bool = False,
    canonical: bool = False,
    **kw: Any,
) -> Trajectory:
    """A trajectory of ``steps`` in ``api``'s wire shape. ``token_ids=True`` gives the calls
    prefix-consistent character-level ids (see :func:`decode`) and builds the segments."""
    calls = BUILDERS[api](steps, final)
    if canonical:
        calls = [c.model_copy(update={"response": to_canonical(c.response)}) for c in calls]
    if token_ids:
        calls = _with_ids(calls, steps, final)
    if reward is None:
        reward = 1.0 if status == "success" else 0.0
    t = Trajectory(rollout_id=rollout_id, task_id=task_id, status=status, reward=reward, calls=calls, **kw)
    return t.build() if token_ids else t
