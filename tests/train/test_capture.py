"""Text captures never enter a trainer; every trajectory says how it was captured.

The text capture is real: a rollout served by the ``openai:`` pass-through back-end against a local
fake OpenAI-compatible API (which, like every such API, returns text and no token ids), driven by the
real ``openai`` SDK. Its calls carry ids tokenized after the fact, so the trajectory is ``capture:
text`` and the trainer's sample builder (and the veRL adapter) must refuse it.
"""

from __future__ import annotations

import logging

import openai
import pytest
from testservers import serve_app, tool_then_answer_upstream

from openforge.core.trajectory import Trajectory, TrajectoryGroup, build_segments
from openforge.core.types import ModelCall
from openforge.proxy.backends import parse_backend_spec
from openforge.proxy.server import ProxyServer
from openforge.train.grpo import build_samples, count_mixed_groups, group_advantages
from openforge.train.verl.outputs import TextCaptureError, segment_rows


def _call(i: int, prompt: list[int], out: list[int]) -> ModelCall:
    return ModelCall(index=i, prompt_ids=prompt, output_ids=out, output_logprobs=[-1.0] * len(out))


def _exact(rid: str, reward: float) -> Trajectory:
    return Trajectory(rollout_id=rid, task_id="t", reward=reward, calls=[_call(0, [1, 2], [3, 4])]).build()


@pytest.fixture
async def text_trajectory(tokenizer) -> Trajectory:
    """A finished rollout captured through the pass-through back-end (real SDK, real sockets)."""
    async with serve_app(tool_then_answer_upstream()) as url:
        backend = parse_backend_spec(f"openai:{url}/v1", tokenizer=tokenizer, model="teacher")
        async with ProxyServer(backend) as proxy:
            h = proxy.create_rollout("t")
            c = openai.AsyncOpenAI(base_url=h.openai_base_url, api_key=h.api_key, max_retries=0)
            r = await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "where am I?"}])
            assert r.choices[0].message.tool_calls[0].function.name == "bash"
            traj = proxy.finish_rollout(h.rollout_id, reward=1.0)
        await backend.aclose()
    return traj


async def test_a_pass_through_rollout_is_a_text_capture_and_says_so(text_trajectory):
    t = text_trajectory
    assert t.capture == "text" and t.calls and not t.calls[0].exact and t.calls[0].output_ids
    assert '"capture":"text"' in t.to_json()
    assert Trajectory.from_json(t.to_json()).capture == "text"
    assert _exact("e", 1.0).capture == "tokens"
    # a writer cannot claim exactness its calls do not have; a "text" claim over exact calls is kept
    doc = t.model_dump(mode="json")
    assert Trajectory.model_validate({**doc, "capture": "tokens"}).capture == "text"
    assert Trajectory.model_validate({**_exact("e", 1.0).model_dump(), "capture": "text"}).capture == "text"


async def test_the_sample_builder_leaves_a_text_capture_out_of_the_group_and_logs_why(text_trajectory, caplog):
    """The text rollout's reward is not the behaviour policy's: it must not move the baseline of the
    exact rollouts beside it (today it does: advantages over [1, 0, 1] instead of [1, 0])."""
    group = TrajectoryGroup(task_id="t", trajectories=[_exact("a", 1.0), _exact("b", 0.0), text_trajectory])
    with caplog.at_level(logging.WARNING, logger="openforge.train"):
        samples = build_samples([group])
    assert {s.rollout_id for s in samples} == {"a", "b"}
    want = group_advantages([1.0, 0.0])
    assert [s.advantage for s in sorted(samples, key=lambda s: s.rollout_id)] == pytest.approx(want)
    assert any(text_trajectory.rollout_id in r.getMessage() and "captured as text" in r.getMessage()
               for r in caplog.records)
    # dynamic sampling counts only what can train: one exact rollout beside a text one is no signal
    assert count_mixed_groups([TrajectoryGroup(task_id="t", trajectories=[_exact("a", 0.0), text_trajectory])]) == 0


async def test_a_text_capture_carrying_segments_is_still_refused(text_trajectory):
    """A writer that segmented the after-the-fact ids as if they were sampled (an import, an external
    driver) does not get them trained: neither by the CPU trainer's builder nor by the veRL adapter."""
    as_if_exact = [c.model_copy(update={"exact": True, "output_logprobs": [-1.0] * len(c.output_ids)})
                   for c in text_trajectory.calls]
    segs, _ = build_segments(as_if_exact, reward=1.0)
    assert segs and segs[0].num_trained_tokens
    forged = text_trajectory.model_copy(update={"segments": segs})
    assert forged.capture == "text"
    group = TrajectoryGroup(task_id="t", trajectories=[forged, _exact("b", 0.0), _exact("c", 0.5)])
    samples = build_samples([group])
    assert forged.rollout_id not in {s.rollout_id for s in samples}
    with pytest.raises(TextCaptureError, match="captured as text"):
        segment_rows(forged)
    assert segment_rows(_exact("b", 0.0))
