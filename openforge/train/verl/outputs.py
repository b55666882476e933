"""Trajectory → veRL rows: one ``AgentLoopOutput`` per segment, the reward on the last.

Owns: :func:`segment_rows` (pure: a trajectory's segments as prompt/response/mask/logprob dicts)
and :func:`to_agent_loop_outputs` (the same as veRL 0.9 ``AgentLoopOutput`` objects).

A segment splits at its first policy-generated token: everything before is the row's prompt, the
rest its response (``response_mask`` = the segment's loss mask, ``response_logprobs`` its behaviour
logprobs with 0.0 on context tokens). veRL's V1 trainer computes GRPO from each session's *last*
row and broadcasts the advantage to every row of the session, so the segment holding the rollout's
final call goes last, and it carries ``reward_score`` plus ``extra_fields["reward_extra_info"]``
(veRL copies both to the earlier rows; without the info dict it raises ``KeyError``). Every row
carries int ``min_global_steps`` / ``max_global_steps`` (veRL's staleness bookkeeping).

A trajectory captured as text (``capture: text``: some answer came back without the sampled token
ids) never becomes a row: :func:`segment_rows` refuses it with :class:`TextCaptureError`.
"""

from __future__ import annotations

from typing import Any

from ...core.trajectory import Trajectory

__all__ = ["TextCaptureError", "segment_rows", "to_agent_loop_outputs"]

REWARD_INFO_KEYS = ("acc", "n_calls", "n_segments")


class TextCaptureError(ValueError):
    """A text-captured trajectory was handed to the trainer: it never trains."""


def segment_rows(traj: Trajectory) -> list[dict[str, Any]]:
    """The trajectory's segments as veRL-shaped dicts, the final call's segment last.

    Segments without a trained token are dropped (veRL must never see a row whose
    ``sum(response_mask) == 0``). A ``capture: text`` trajectory is refused (:class:`TextCaptureError`).
    """
    if traj.capture != "tokens":
        raise TextCaptureError(f"rollout {traj.rollout_id}: captured as text (an answer came back without the "
                               "token ids the policy sampled); text captures never enter a trainer")
    segs = [s for s in traj.segments if s.num_trained_tokens > 0]
    segs.sort(key=lambda s: max(s.call_indices))
    rows = []
    for s in segs:
        first = s.loss_mask.index(1)
        rows.append({
            "prompt_ids": list(s.input_ids[:first]),
            "response_ids": list(s.input_ids[first:]),
            "response_mask": list(s.loss_mask[first:]),
            "response_logprobs": [float(x) for x in s.logprobs[first:]],
            "num_turns": 2 * len(s.call_indices),
            "break_reason": str(s.break_reason),
        })
    return rows


def to_agent_loop_outputs(traj: Trajectory, *, global_steps: int, min_global_steps: int | None = None,
                          max_global_steps: int | None = None) -> list[Any]:
    """Build veRL ``AgentLoopOutput`` rows for one rollout (imports verl)."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput

    rows = segment_rows(traj)
    if not rows:
        raise ValueError(f"rollout {traj.rollout_id}: no segment with a policy-generated token")
    lo = int(min_global_steps if min_global_steps is not None else global_steps)
    hi = int(max_global_steps if max_global_steps is not None else global_steps)
    outs = []
    for r in rows:
        outs.append(AgentLoopOutput(
            prompt_ids=r["prompt_ids"], response_ids=r["response_ids"], response_mask=r["response_mask"],
            response_logprobs=r["response_logprobs"], num_turns=r["num_turns"], metrics=AgentLoopMetrics(),
            extra_fields={"min_global_steps": lo, "max_global_steps": hi, "turn_scores": [], "tool_rewards": []},
        ))
    outs[-1].reward_score = float(traj.reward)
    outs[-1].extra_fields["reward_extra_info"] = {
        "acc": float(traj.reward),
        "n_calls": float(len(traj.calls)),
        "n_segments": float(len(rows)),
    }
    return outs
