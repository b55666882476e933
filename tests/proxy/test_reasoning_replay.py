"""A harness that replays an assistant turn with its reasoning stripped is detected, per wire API.

The policy answers with reasoning (``<think>``); the harness sends the conversation back with that turn
either intact (reasoning replayed in its API's own form: chat ``reasoning_content``, a Responses
``reasoning`` item, a Messages ``thinking`` block, a Gemini ``thought`` part) or stripped of it. Intact: the proxy splices the
next call onto the exact tokens, one segment. Stripped: the harness did not send what was generated,
so a new segment begins with ``break_reason: thinking_stripped``.

A chat template may drop past reasoning *itself* (Qwen3-style: no ``<think>`` before the last user
turn). Then a harness that replayed the reasoning intact still gets a prompt without it; that is the
template's doing, not the harness's, and is classified ``template_drift``.
"""

from __future__ import annotations

import anthropic
import openai
import pytest

from openforge.core.types import BreakReason
from openforge.proxy.backends.scripted import ScriptedBackend
from openforge.proxy.render import Renderer, hermes_template
from openforge.proxy.server import ProxyServer

REASONING, FIRST, SECOND = "I should say hello.", "Hello there.", "Fine, thanks."
USER1 = {"role": "user", "content": "hi"}
USER2 = {"role": "user", "content": "how are you?"}


async def _chat(h, stripped: bool) -> None:
    c = openai.AsyncOpenAI(base_url=h.openai_base_url, api_key=h.api_key, max_retries=0)
    r = await c.chat.completions.create(model="m", messages=[USER1])
    msg = r.choices[0].message
    assert msg.content == FIRST and msg.reasoning_content == REASONING  # type: ignore[attr-defined]
    replay = {"role": "assistant", "content": msg.content}
    if not stripped:
        replay["reasoning_content"] = msg.reasoning_content  # type: ignore[attr-defined]
    r2 = await c.chat.completions.create(model="m", messages=[USER1, replay, USER2])
    assert r2.choices[0].message.content == SECOND


async def _responses(h, stripped: bool) -> None:
    c = openai.AsyncOpenAI(base_url=h.openai_base_url, api_key=h.api_key, max_retries=0)
    r = await c.responses.create(model="m", input=[USER1])
    assert [o.type for o in r.output] == ["reasoning", "message"] and r.output_text == FIRST
    items = [o.model_dump(exclude_none=True) for o in r.output if not (stripped and o.type == "reasoning")]
    r2 = await c.responses.create(model="m", input=[USER1, *items, USER2])
    assert r2.output_text == SECOND


async def _messages(h, stripped: bool) -> None:
    a = anthropic.AsyncAnthropic(base_url=h.anthropic_base_url, api_key=h.api_key, max_retries=0)
    m = await a.messages.create(model="claude", max_tokens=200, messages=[USER1])
    assert [b.type for b in m.content] == ["thinking", "text"] and m.content[0].thinking == REASONING
    blocks = [b.model_dump(exclude_none=True) for b in m.content if not (stripped and b.type == "thinking")]
    m2 = await a.messages.create(model="claude", max_tokens=200,
                                 messages=[USER1, {"role": "assistant", "content": blocks}, USER2])
    assert m2.content[-1].text == SECOND


async def _gemini(h, stripped: bool) -> None:
    from google import genai

    client = genai.Client(api_key=h.api_key, http_options={"base_url": h.gemini_base_url})
    r = await client.aio.models.generate_content(model="gemini", contents="hi")
    parts = r.candidates[0].content.parts
    assert [p.thought for p in parts] == [True, None] and parts[0].text == REASONING and r.text == FIRST
    turn = genai.types.Content(role="model", parts=[p for p in parts if not (stripped and p.thought)])
    r2 = await client.aio.models.generate_content(model="gemini", contents=["hi", turn, "how are you?"])
    assert r2.text == SECOND


SDKS = {"chat": _chat, "responses": _responses, "messages": _messages, "gemini": _gemini}


async def _reasons(tokenizer, api: str, stripped: bool, renderer: Renderer | None = None) -> list[BreakReason]:
    backend = ScriptedBackend({"turns": [{"text": FIRST, "reasoning": REASONING}, {"text": SECOND}]},
                              tokenizer=tokenizer)
    async with ProxyServer(backend, renderer=renderer) as proxy:
        h = proxy.create_rollout("t")
        await SDKS[api](h, stripped)
        traj = await proxy.afinish_rollout(h.rollout_id, reward=1.0)
    assert sorted(i for s in traj.segments for i in s.call_indices) == [0, 1]  # both calls train either way
    return [s.break_reason for s in traj.segments]


@pytest.mark.parametrize("api", list(SDKS))
async def test_reasoning_replayed_intact_continues_the_segment(tokenizer, api):
    assert await _reasons(tokenizer, api, stripped=False) == [BreakReason.FIRST]


@pytest.mark.parametrize("api", list(SDKS))
async def test_reasoning_stripped_by_the_harness_is_a_thinking_stripped_break(tokenizer, api):
    assert await _reasons(tokenizer, api, stripped=True) == [BreakReason.FIRST, BreakReason.THINKING_STRIPPED]


def _dropping_renderer(tokenizer) -> Renderer:
    """The bundled template, made to drop reasoning from every assistant turn but a final one (as
    Qwen3's template drops it before the last user turn)."""
    t = hermes_template()
    assert "{% if message.reasoning_content %}" in t
    return Renderer(tokenizer, template=t.replace("{% if message.reasoning_content %}",
                                                  "{% if message.reasoning_content and loop.last %}"))


@pytest.mark.parametrize("api", list(SDKS))
async def test_reasoning_the_template_drops_itself_is_not_blamed_on_the_harness(tokenizer, api):
    renderer = _dropping_renderer(tokenizer)
    assert await _reasons(tokenizer, api, stripped=False, renderer=renderer) == [
        BreakReason.FIRST, BreakReason.TEMPLATE_DRIFT]
    # and a harness that does strip it is still named
    assert await _reasons(tokenizer, api, stripped=True, renderer=renderer) == [
        BreakReason.FIRST, BreakReason.THINKING_STRIPPED]
