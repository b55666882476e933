"""SFT from any teacher: an ``openai:`` pass-through teacher (a local fake OpenAI-compatible server
behind the real proxy, driven by the real ``openai`` SDK) records ``exact: false`` calls; they are
re-rendered with the policy's chat template, the loss on the assistant turns only, for the
warm-start and for ``forge export sft --format tokens``."""

from __future__ import annotations

import json

import pytest
from testservers import serve_app, tool_then_answer_upstream

from openforge.train.sft import export_sft, policy_renderer, sft_samples

TOOLS = [{"type": "function", "function": {"name": "bash", "description": "run a command", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]


def teacher_app():
    """A teacher API: a tool call first, then a final answer once the tool result is in."""
    return tool_then_answer_upstream()


@pytest.fixture
async def teacher_traj(tokenizer):
    import openai

    from openforge.proxy.backends import parse_backend_spec
    from openforge.proxy.server import ProxyServer

    async with serve_app(teacher_app()) as url:
        backend = parse_backend_spec(f"openai:{url}/v1", tokenizer=tokenizer, model="teacher")
        async with ProxyServer(backend) as proxy:
            h = proxy.create_rollout("files-pwd")
            c = openai.AsyncOpenAI(base_url=h.openai_base_url, api_key=h.api_key, max_retries=0)
            msgs = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "where am I?"}]
            r = await c.chat.completions.create(model="x", messages=msgs, tools=TOOLS)
            tc = r.choices[0].message.tool_calls[0]
            msgs += [r.choices[0].message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": tc.id, "content": "/home/agent"}]
            r2 = await c.chat.completions.create(model="x", messages=msgs, tools=TOOLS)
            assert r2.choices[0].message.content == "Finished."
            traj = proxy.finish_rollout(h.rollout_id, reward=1.0)
        await backend.aclose()
    assert traj.calls and all(not c.exact for c in traj.calls) and traj.segments == []
    return traj


def _spans(ids: list[int], mask: list[int], want: int) -> list[list[int]]:
    out: list[list[int]] = []
    for i, m in zip(ids, mask):
        if m == want:
            if not out or out[-1] is None:
                out.append([])
            out[-1].append(i)
        elif out and out[-1] is not None:
            out.append(None)  # type: ignore[arg-type]
    return [s for s in out if s]


async def test_inexact_teacher_trains_sft_on_assistant_turns(teacher_traj, tokenizer, tmp_path):
    assert sft_samples([teacher_traj]) == []  # without the policy's template nothing can be tokenized
    renderer = policy_renderer(tokenizer)
    samples = sft_samples([teacher_traj], renderer)
    assert len(samples) == 1
    s = samples[0]
    turns = [tokenizer.decode(x) for x in _spans(s.input_ids, s.loss_mask, 1)]
    assert turns == ['<tool_call>\n{"name": "bash", "arguments": {"command": "pwd"}}\n</tool_call><|im_end|>',
                     "Finished.<|im_end|>"]
    context = tokenizer.decode(s.input_ids)
    assert '"name": "bash"' in context.split("<|im_end|>")[0]  # the tools are rendered in the system turn
    assert "where am I?" in context and "/home/agent" in context
    # the whole sequence is what the policy's template renders for the final conversation
    msgs = json.loads(json.dumps(teacher_traj.calls[-1].request["messages"]))
    assert context.startswith(renderer.text(msgs[:2], TOOLS, gen=True))
    res = export_sft([teacher_traj], tmp_path / "t.jsonl", fmt="tokens", renderer=renderer)
    assert (res["rows"], res["rendered"]) == (1, 1)
    row = json.loads((tmp_path / "t.jsonl").read_text())
    assert row["input_ids"] == s.input_ids and row["loss_mask"] == s.loss_mask


async def test_forge_export_sft_tokens_from_an_inexact_teacher(teacher_traj, tmp_path):
    from typer.testing import CliRunner

    from openforge.cli.main import app

    src = tmp_path / "trajectory.json"
    src.write_text(teacher_traj.to_json())
    out = tmp_path / "tokens.jsonl"
    r = CliRunner().invoke(app, ["export", "sft", str(out), "--from", str(src), "--format", "tokens"])
    assert r.exit_code == 0, r.output
    assert "1 re-rendered" in r.output
    assert len(out.read_text().splitlines()) == 1
    r = CliRunner().invoke(app, ["export", "sft", str(out), "--from", str(src), "--min-reward", "2"])
    assert r.exit_code == 1 and "no chat row written" in r.output  # never 0 rows silently


def test_warm_start_error_names_the_real_cause(tmp_path):
    from openforge.core.trajectory import Trajectory
    from openforge.core.types import ModelCall
    from openforge.train.sft import _no_samples

    call = ModelCall(index=0, api="messages", request={"messages": []}, prompt_ids=[1], output_ids=[2], exact=False)
    good = [Trajectory(rollout_id="a", task_id="t", reward=1.0, calls=[call]).build()]
    msg = _no_samples(good, 3, {"success": 1}, tmp_path)
    assert "1 teacher rollout(s) succeeded but all their calls are inexact" in msg and "solved none" not in msg
    assert "solved none of 3 tasks" in _no_samples([], 3, {"policy_failure": 3}, tmp_path)
