"""build_segments / validate_segments: hand-written cases per break reason + property tests."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openforge.core.trajectory import SegmentValidationError, Trajectory, build_segments, validate_segments
from openforge.core.types import BreakReason, CallStatus, ModelCall, RolloutStatus, Segment


def call(i, prompt, out, *, sys_len=2, **kw):
    return ModelCall(
        index=i,
        prompt_ids=list(prompt),
        output_ids=list(out),
        output_logprobs=[-0.1 * (j + 1) for j in range(len(out))],
        system_prefix_len=sys_len,
        **kw,
    )


def reasons(segs):
    return [s.break_reason for s in segs]


def test_multi_turn_merges_into_one_segment():
    calls = [call(0, [1, 2, 3], [4, 5]), call(1, [1, 2, 3, 4, 5, 6, 7], [8]), call(2, [1, 2, 3, 4, 5, 6, 7, 8, 9], [10])]
    segs, skipped = build_segments(calls, reward=1.0)
    assert skipped == {}
    assert len(segs) == 1
    s = segs[0]
    assert s.input_ids == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    assert s.loss_mask == [0, 0, 0, 1, 1, 0, 0, 1, 0, 1]
    assert s.logprobs == [0, 0, 0, -0.1, -0.2, 0, 0, -0.1, 0, -0.1]
    assert s.call_indices == [0, 1, 2]
    assert s.break_reason == BreakReason.FIRST
    assert s.reward == 1.0
    validate_segments(calls, segs)


def test_interleaved_subagent_merges_per_lineage():
    main0 = call(0, [1, 2, 10], [11])
    sub0 = call(1, [50, 51, 60], [61])  # different system prompt -> new lineage
    main1 = call(2, [1, 2, 10, 11, 12], [13])  # main resumes: extends lineage 0
    sub1 = call(3, [50, 51, 60, 61, 62], [63])
    main2 = call(4, [1, 2, 10, 11, 12, 13, 14], [15])
    segs, _ = build_segments([main0, sub0, main1, sub1, main2])
    assert reasons(segs) == [BreakReason.FIRST, BreakReason.NEW_LINEAGE]
    assert [s.call_indices for s in segs] == [[0, 2, 4], [1, 3]]
    validate_segments([main0, sub0, main1, sub1, main2], segs)


def test_longest_match_wins():
    # Two lineages both prefixes of the prompt: the call joins the longer one.
    a = call(0, [1, 2, 3], [4])
    b = call(1, [1, 2, 3, 4, 5], [6])
    c = call(2, [1, 2, 3, 9], [7])  # rewrite: new lineage [1,2,3,9,7]
    d = call(3, [1, 2, 3, 9, 7, 8], [0])
    segs, _ = build_segments([a, b, c, d])
    assert [s.call_indices for s in segs] == [[0, 1], [2, 3]]


def test_history_rewritten_compaction_keeps_system_prompt():
    calls = [call(0, [1, 2, 3], [4]), call(1, [1, 2, 3, 4, 5], [6]), call(2, [1, 2, 99, 98], [7])]
    segs, _ = build_segments(calls)
    assert reasons(segs) == [BreakReason.FIRST, BreakReason.HISTORY_REWRITTEN]


def test_new_lineage_when_leading_prompt_differs():
    calls = [call(0, [1, 2, 3], [4]), call(1, [7, 8, 3], [4])]
    segs, _ = build_segments(calls)
    assert reasons(segs) == [BreakReason.FIRST, BreakReason.NEW_LINEAGE]


def test_thinking_stripped():
    think = [100, 5, 6, 101]  # <think> 5 6 </think>
    c0 = call(0, [1, 2, 3], [*think, 7, 8], has_reasoning=True)
    c1 = call(1, [1, 2, 3, 7, 8, 9], [10])  # history re-sent without the thinking block
    segs, _ = build_segments([c0, c1])
    assert reasons(segs) == [BreakReason.FIRST, BreakReason.THINKING_STRIPPED]
    validate_segments([c0, c1], segs)


def test_template_drift_needs_text():
    vocab = {1: "<s>", 2: "sys", 3: "hi", 4: "ab", 5: "a", 6: "b", 7: "!", 8: "ok"}

    def detok(ids):
        return "".join(vocab[i] for i in ids)

    c0 = call(0, [1, 2, 3], [4])  # generated "ab" as one token
    c1 = call(1, [1, 2, 3, 5, 6, 7], [8])  # harness sent "ab" back, re-tokenized as a + b
    segs, _ = build_segments([c0, c1], detokenize=detok)
    assert reasons(segs) == [BreakReason.FIRST, BreakReason.TEMPLATE_DRIFT]
    segs, _ = build_segments([c0, c1])  # without text it is a rewrite
    assert reasons(segs) == [BreakReason.FIRST, BreakReason.HISTORY_REWRITTEN]


def test_retry_same_output_is_not_trained_twice():
    c0 = call(0, [1, 2, 3], [4, 5])
    c1 = call(1, [1, 2, 3], [4, 5])
    segs, skipped = build_segments([c0, c1])
    assert len(segs) == 1 and segs[0].call_indices == [0]
    assert skipped == {1: "duplicate_retry"}


def test_retry_with_new_sample_starts_retry_segment():
    c0 = call(0, [1, 2, 3], [4, 5])
    c1 = call(1, [1, 2, 3], [6])
    c2 = call(2, [1, 2, 3, 6, 7], [8])  # the harness went on with the retry's answer
    segs, _ = build_segments([c0, c1, c2])
    assert reasons(segs) == [BreakReason.FIRST, BreakReason.RETRY]
    assert segs[1].call_indices == [1, 2]


def test_untrainable_calls_are_context_only():
    c0 = call(0, [1, 2, 3], [4])
    c1 = call(1, [1, 2, 3, 4, 5], [6], exact=False)
    c2 = ModelCall(index=2, prompt_ids=[1, 2, 3, 4, 5, 6, 7], status=CallStatus.ERROR, error="backend down")
    c3 = ModelCall(index=3, prompt_ids=[1, 2, 3, 4, 5, 6, 7], status=CallStatus.CANCELLED)  # nothing generated yet
    c4 = call(4, [1, 2, 3, 4, 5, 6, 7], [9])
    segs, skipped = build_segments([c0, c1, c2, c3, c4])
    assert skipped == {1: "not_exact", 2: "error", 3: "empty"}
    assert len(segs) == 1 and segs[0].call_indices == [0, 4]
    assert segs[0].loss_mask == [0, 0, 0, 1, 0, 0, 0, 1]  # 6 (not exact) is context
    validate_segments([c0, c1, c2, c3, c4], segs)


def test_every_segment_carries_the_terminal_reward():
    """No per-segment discount (the unused ``gamma`` is gone): an earlier segment trains with the
    rollout's own reward, and ``build_segments`` refuses the old keyword."""
    calls = [call(0, [1, 2, 3], [4]), call(1, [9, 9, 3], [5]), call(2, [9, 9, 3, 5, 6], [7])]
    segs, _ = build_segments(calls, reward=0.75)
    assert [s.reward for s in segs] == [0.75, 0.75]
    with pytest.raises(TypeError):
        build_segments(calls, reward=1.0, gamma=0.5)


def test_validator_catches_corruption():
    calls = [call(0, [1, 2, 3], [4, 5]), call(1, [1, 2, 3, 4, 5, 6], [7])]
    (seg,), _ = build_segments(calls)
    bad_mask = seg.model_copy(update={"loss_mask": [0, 0, 1, 1, 1, 0, 1]})
    with pytest.raises(SegmentValidationError, match="loss_mask"):
        validate_segments(calls, [bad_mask])
    bad_lp = seg.model_copy(update={"logprobs": [0, 0, 0, -0.2, -0.1, 0, -0.1]})
    with pytest.raises(SegmentValidationError, match="logprobs"):
        validate_segments(calls, [bad_lp])
    shifted = seg.model_copy(update={"input_ids": [1, 2, 3, 4, 5, 6, 8]})
    with pytest.raises(SegmentValidationError, match="output_ids"):
        validate_segments(calls, [shifted])
    with pytest.raises(SegmentValidationError, match="twice"):
        validate_segments(calls, [seg, seg])
    with pytest.raises(ValueError):
        Segment(input_ids=[1], loss_mask=[1, 0], logprobs=[0.0], call_indices=[0], break_reason="first")


def test_trajectory_json_round_trip_is_lossless():
    calls = [
        call(0, [1, 2, 3], [4, 5], request={"messages": [{"role": "user", "content": "é"}]}, response={"id": "x"}),
        call(1, [1, 2, 3, 4, 5, 6], [7], finish_reason="stop", started_at=1.5, latency_s=0.25),
    ]
    calls[1] = calls[1].model_copy(update={"output_logprobs": [-1.2345678901234567e-7]})
    t = Trajectory(rollout_id="r1", task_id="t", harness="react", environment="claw", reward=1.0, calls=calls,
                   rewards={"a": 0.5}, metrics={"k": [1, 2]}).build()
    back = Trajectory.from_json(t.to_json())
    assert back == t
    assert back.status == RolloutStatus.SUCCESS and back.status == "success"
    assert back.segments[0].logprobs[-1] == -1.2345678901234567e-7


# ------------------------------------------------------------------ property-based


@st.composite
def conversations(draw):
    """Simulate agents (main + sub-agents) producing calls with every kind of break.

    Fresh tokens come from a counter, so no two events collide by accident and the expected break
    reason of every call is known exactly.
    """
    fresh = itertools.count(1000)

    def toks(n):
        return [next(fresh) for _ in range(n)]

    agents = []
    calls: list[ModelCall] = []
    expected: Counter = Counter()
    trained = 0
    n_events = draw(st.integers(1, 25))

    def new_agent():
        sys = toks(draw(st.integers(1, 4)))
        agents.append({"sys": sys, "ctx": sys + toks(draw(st.integers(1, 5))), "last": None})
        return agents[-1]

    for _ in range(n_events):
        kind = draw(st.sampled_from(["step", "step", "step", "sub", "compact", "retry_same", "retry_new",
                                     "think", "not_exact", "error"]))
        if not agents or kind == "sub":
            a = new_agent()
            expected[BreakReason.FIRST if not calls else BreakReason.NEW_LINEAGE] += 1
            kind = "first_step"
        else:
            a = draw(st.sampled_from(agents))
        i = len(calls)
        sys_len = len(a["sys"])
        if kind in ("retry_same", "retry_new") and a["last"] is not None and a["last"].trainable:
            last = a["last"]
            if kind == "retry_same":
                c = last.model_copy(update={"index": i})
            else:
                out = toks(draw(st.integers(1, 4)))
                c = call(i, last.prompt_ids, out, sys_len=sys_len)
                expected[BreakReason.RETRY] += 1
                trained += 1
                a.pop("pending_strip", None)  # the new sample replaced the thinking turn
                a["ctx"] = c.prompt_ids + out
            calls.append(c)
            a["last"] = c
            continue
        if kind == "compact":
            a["ctx"] = a["sys"] + toks(draw(st.integers(1, 5)))
            a.pop("pending_strip", None)  # the rewrite dominates
            expected[BreakReason.HISTORY_REWRITTEN] += 1
        prompt = a["ctx"] if kind == "first_step" else a["ctx"] + toks(draw(st.integers(0 if kind == "compact" else 1, 5)))
        if kind == "error":
            c = ModelCall(index=i, prompt_ids=prompt, status=CallStatus.ERROR, system_prefix_len=sys_len)
            calls.append(c)
            continue  # the harness will simply call again with a longer context
        thinking = kind == "think"
        out = toks(3) if thinking else []
        answer = toks(draw(st.integers(1, 4)))
        c = call(i, prompt, out + answer, sys_len=sys_len, exact=kind != "not_exact", has_reasoning=thinking)
        if c.trainable and a.pop("pending_strip", False):
            expected[BreakReason.THINKING_STRIPPED] += 1
        calls.append(c)
        trained += c.trainable
        a["ctx"] = prompt + answer if thinking else prompt + out + answer  # thinking is not sent back
        a["last"] = c
        if thinking:
            a["pending_strip"] = True
    # a strip still pending at the end produced no call: nothing to expect
    return calls, expected, trained


@settings(max_examples=300, deadline=None)
@given(conversations(), st.floats(0, 1))
def test_property_segments_are_exact_and_classified(conv, reward):
    calls, expected, trained = conv
    segs, skipped = build_segments(calls, reward=reward)
    validate_segments(calls, segs)
    assert Counter(reasons(segs)) == expected
    assert sum(len(s.call_indices) for s in segs) == trained
    in_segments = {i for s in segs for i in s.call_indices}
    assert in_segments.isdisjoint(skipped)
    assert in_segments | set(skipped) == {c.index for c in calls}
    for s in segs:
        assert s.reward == reward
    # Every trained token is generated exactly once, in call order.
    gen = [t for s in segs for t, m in zip(s.input_ids, s.loss_mask) if m]
    want = [t for s in segs for i in s.call_indices for t in calls[i].output_ids]
    assert gen == want


def test_a_call_cancelled_mid_generation_trains_the_tokens_it_had_generated():
    """The rollout ran out of time while the policy was still talking: what it had said is its own,
    trained with the rollout's outcome (a timeout: 0), not thrown away."""
    c0 = call(0, [1, 2, 3], [4])
    c1 = call(1, [1, 2, 3, 4, 5], [6, 7], status=CallStatus.CANCELLED)
    segs, skipped = build_segments([c0, c1])
    assert skipped == {} and len(segs) == 1 and segs[0].call_indices == [0, 1]
    assert segs[0].loss_mask == [0, 0, 0, 1, 0, 1, 1]
    validate_segments([c0, c1], segs)
