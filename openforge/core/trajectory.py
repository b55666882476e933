"""Trajectories and the token-exact segment builder.

Owns: :class:`Trajectory`, :class:`TrajectoryGroup`, :func:`build_segments`,
:func:`validate_segments`, :class:`SegmentValidationError` and :class:`NonFiniteLogprobError`.
Pure functions, no I/O.

``build_segments`` turns the recorded calls of one rollout into training segments. A call whose
prompt ids *extend* an open segment (the segment's ids are a prefix of the prompt) continues it:
the new prompt tokens go in with loss mask 0, the generated tokens with mask 1 and their
behaviour logprobs. Several lineages stay open at once and a call joins the one it extends with
the longest match, so a main agent interleaved with sub-agents merges into one segment per
lineage. A call that extends no lineage starts a segment whose ``break_reason`` says why.

A lineage that diverges inside a generated span whose reasoning (``<think>``) the new prompt lacks is
``thinking_stripped`` when the harness sent that turn back without its reasoning, and ``template_drift``
when the harness did send it (in its wire API's form, :func:`~openforge.core.reasoning.replayed_reasoning`)
and the chat template dropped it (Qwen3-style templates render no past reasoning).

A call whose reply may not have reached the client (``delivery_uncertain``) trains no token, as an
inexact or failed call does: it is skipped, and the next call's prompt brings its tokens in as context
(mask 0) if the harness did see them. A call cancelled mid-generation is known undelivered, not
uncertain: the tokens it had sampled are the policy's and are trained with the rollout's outcome.

Every trajectory says how it was captured (``capture``): ``tokens`` when every answered call carries
the exact ids the policy sampled, ``text`` when any answer came back as text only (a pass-through
back-end). A ``text`` trajectory never enters a trainer (:attr:`TrajectoryGroup.trainable`); SFT export
may still use it.

Cost is linear in the total number of prompt tokens: each call is compared against a lineage
only after an O(1) probe of the lineage's length and last tokens, and the comparison itself is a
C-level slice compare.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

from .call_origin import TRAIN_CALLS, TrainCalls, label_origins
from .reasoning import replayed_reasoning
from .types import TRAJECTORY_VERSION, BreakReason, CallStatus, Capture, ModelCall, RolloutStatus, Segment

__all__ = [
    "NonFiniteLogprobError",
    "SegmentValidationError",
    "Trajectory",
    "TrajectoryGroup",
    "build_segments",
    "capture_of",
    "validate_segments",
]

Detokenize = Callable[[Sequence[int]], str]

THINK_MARKERS = ("<think>", "<thinking>", "<|thinking|>")


class SegmentValidationError(ValueError):
    """A segment breaks the token-exact invariants (a bug in whoever produced it)."""


class NonFiniteLogprobError(SegmentValidationError):
    """A trainable call carries a NaN/inf behaviour logprob: its rollout cannot be trained."""


# --------------------------------------------------------------------------------------------
# Builder
# --------------------------------------------------------------------------------------------


@dataclass
class _Lineage:
    ids: list[int]
    mask: list[int]
    logprobs: list[float]
    calls: list[int]
    reason: BreakReason
    system_prefix_len: int
    # (start, end, call_index) of each generated span, in ids coordinates
    spans: list[tuple[int, int, int]] = field(default_factory=list)


def _extends(prompt: list[int], lin: _Lineage) -> bool:
    n = len(lin.ids)
    if n > len(prompt) or n == 0:
        return False
    # O(1) probes first: almost every non-matching lineage differs at its last token.
    if prompt[n - 1] != lin.ids[-1] or prompt[n >> 1] != lin.ids[n >> 1]:
        return False
    return prompt[:n] == lin.ids


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]; slice compares keep it C-speed
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _classify(
    call: ModelCall, lineages: list[_Lineage], calls: Sequence[ModelCall], detokenize: Detokenize | None
) -> BreakReason:
    prompt = call.prompt_ids
    best, best_k = None, -1
    for lin in lineages:
        k = _common_prefix(lin.ids, prompt)
        if k > best_k:
            best, best_k = lin, k
    assert best is not None
    span = next(((s, e, ci) for s, e, ci in best.spans if s <= best_k < e), None)
    if span is not None:
        s, _e, ci = span
        gen = calls[ci]
        if gen.has_reasoning or (detokenize is not None and _has_think(detokenize(gen.output_ids))):
            new_text = detokenize(prompt[s:]) if detokenize is not None else ""
            if detokenize is None or not _has_think(new_text):
                # who dropped it: the harness (sent the turn back without it) or the template (did not render it)
                if replayed_reasoning(call.api, call.request, gen.response):
                    return BreakReason.TEMPLATE_DRIFT
                return BreakReason.THINKING_STRIPPED
        if detokenize is not None:
            old_text = detokenize(best.ids[s:])
            new_text = detokenize(prompt[s:])
            if new_text.startswith(old_text.rstrip()) or old_text.startswith(new_text.rstrip()):
                return BreakReason.TEMPLATE_DRIFT
        return BreakReason.HISTORY_REWRITTEN
    # Divergence in context tokens: the same text tokenized differently is drift, not a rewrite.
    if detokenize is not None and best_k < len(best.ids) and detokenize(prompt).startswith(detokenize(best.ids) or "\0"):
        return BreakReason.TEMPLATE_DRIFT
    sys_len = call.system_prefix_len if call.system_prefix_len is not None else best.system_prefix_len
    if sys_len > 0 and best_k >= sys_len and best.system_prefix_len == sys_len:
        return BreakReason.HISTORY_REWRITTEN
    if call.system_prefix_len is None and best.system_prefix_len <= 0:
        # No renderer hint: a call that keeps most of the lineage's first prompt is the same agent.
        first_prompt = len(calls[best.calls[0]].prompt_ids) if best.calls else 0
        if first_prompt and best_k * 2 >= first_prompt:
            return BreakReason.HISTORY_REWRITTEN
    return BreakReason.NEW_LINEAGE


def _check_finite(call_index: int, logprobs: Sequence[float], where: str = "") -> None:
    bad = next((i for i, lp in enumerate(logprobs) if not math.isfinite(lp)), None)
    if bad is not None:
        raise NonFiniteLogprobError(
            f"{where}call {call_index}: output token {bad} has logprob {logprobs[bad]} (not finite); the back-end "
            "returned unusable logprobs, so this rollout cannot be trained")


def _has_think(text: str) -> bool:
    return any(m in text for m in THINK_MARKERS)


def build_segments(
    calls: Iterable[ModelCall],
    *,
    reward: float = 0.0,
    detokenize: Detokenize | None = None,
    train_calls: TrainCalls = "all",
) -> tuple[list[Segment], dict[int, str]]:
    """Turn one rollout's calls into training segments.

    Returns ``(segments, skipped)`` where ``skipped`` maps the index of every call that trains no
    token to the reason (``not_exact``, ``error``, ``context_overflow``, ``delivery_uncertain``, ``empty``,
    ``duplicate_retry``). A call cancelled mid-generation trains the tokens it had generated (``empty``
    when it had none).
    Raises :class:`NonFiniteLogprobError` when a trainable call carries a non-finite (NaN/inf)
    behaviour logprob: the importance ratio of such a token is undefined, so the rollout cannot
    be trained at all.

    ``reward`` is the rollout's terminal reward, every segment's reward. ``detokenize`` (optional)
    lets the classifier tell template drift (same text, other tokens) from a rewritten history.
    ``train_calls``: ``all`` (default here) trains every call; ``harness`` (the default of
    :meth:`Trajectory.build` and of ``rollout.train_calls``) skips the calls
    :func:`~openforge.core.call_origin.label_origins` labels ``foreign`` (reason ``foreign``: another process in
    the sandbox made them).
    """
    if train_calls not in TRAIN_CALLS:
        raise ValueError(f"train_calls must be one of {', '.join(TRAIN_CALLS)}, got {train_calls!r}")
    ordered = sorted(calls, key=lambda c: c.index)
    by_index = {c.index: c for c in ordered}
    if len(by_index) != len(ordered):
        raise ValueError("duplicate call index in one rollout")
    origins: dict[int, str | None] = {}
    if train_calls == "harness":  # labels set by Trajectory.build are used as they are
        origins = ({c.index: c.origin for c in ordered} if all(c.origin for c in ordered)
                   else dict(label_origins(ordered)))
    lineages: list[_Lineage] = []
    seen_prompts: dict[tuple[int, int, int], list[ModelCall]] = {}
    skipped: dict[int, str] = {}

    for call in ordered:
        if origins.get(call.index) == "foreign":
            skipped[call.index] = "foreign"
            continue
        if not call.exact:
            skipped[call.index] = "not_exact"
            continue
        if call.status not in (CallStatus.OK, CallStatus.CANCELLED):  # cancelled: its sampled tokens, if any
            skipped[call.index] = str(call.status)
            continue
        if call.delivery_uncertain:
            skipped[call.index] = "delivery_uncertain"
            continue
        if not call.output_ids or len(call.output_logprobs) != len(call.output_ids):
            skipped[call.index] = "empty"
            continue
        _check_finite(call.index, call.output_logprobs)
        prompt = call.prompt_ids
        key = (len(prompt), prompt[-1] if prompt else -1, hash(tuple(prompt[-64:])))
        twins = [c for c in seen_prompts.get(key, ()) if c.prompt_ids == prompt]
        seen_prompts.setdefault(key, []).append(call)

        target: _Lineage | None = None
        for lin in lineages:
            if _extends(prompt, lin) and (target is None or len(lin.ids) > len(target.ids)):
                target = lin
        if target is None:
            if twins:
                if any(t.output_ids == call.output_ids for t in twins):
                    skipped[call.index] = "duplicate_retry"
                    continue
                reason = BreakReason.RETRY
            elif not lineages:
                reason = BreakReason.FIRST
            else:
                reason = _classify(call, lineages, by_index, detokenize)
            target = _Lineage(
                ids=[], mask=[], logprobs=[], calls=[], reason=reason,
                system_prefix_len=call.system_prefix_len or 0,
            )
            lineages.append(target)
        new = len(prompt) - len(target.ids)
        target.ids.extend(prompt[len(target.ids):])
        target.mask.extend([0] * new)
        target.logprobs.extend([0.0] * new)
        start = len(target.ids)
        target.ids.extend(call.output_ids)
        target.mask.extend([1] * len(call.output_ids))
        target.logprobs.extend(call.output_logprobs)
        target.spans.append((start, len(target.ids), call.index))
        target.calls.append(call.index)

    segments = []
    for lin in lineages:
        segments.append(
            Segment(
                input_ids=lin.ids,
                loss_mask=lin.mask,
                logprobs=lin.logprobs,
                call_indices=lin.calls,
                break_reason=lin.reason,
                reward=reward,
            )
        )
    return segments, skipped


# --------------------------------------------------------------------------------------------
# Validator
# --------------------------------------------------------------------------------------------


def validate_segments(calls: Iterable[ModelCall], segments: Sequence[Segment]) -> None:
    """Check the token-exact invariants; raise :class:`SegmentValidationError` on the first breach.

    For each segment, in order of its ``call_indices``: the segment's ids before the call's
    output are exactly the call's ``prompt_ids``; the next tokens are exactly its ``output_ids``
    with mask 1 and its logprobs; every other token has mask 0 and logprob 0. Only trainable
    calls appear, and no call is trained twice.
    """
    by_index = {c.index: c for c in calls}
    trained: set[int] = set()
    for si, seg in enumerate(segments):
        n = len(seg.input_ids)
        if len(seg.loss_mask) != n or len(seg.logprobs) != n:
            raise SegmentValidationError(f"segment {si}: lengths differ")
        if not seg.call_indices:
            raise SegmentValidationError(f"segment {si}: trains no call")
        expected_mask = [0] * n
        prev = -1
        for ci in seg.call_indices:
            if ci in trained:
                raise SegmentValidationError(f"segment {si}: call {ci} is trained twice")
            trained.add(ci)
            if ci <= prev:
                raise SegmentValidationError(f"segment {si}: call indices not increasing at {ci}")
            prev = ci
            call = by_index.get(ci)
            if call is None:
                raise SegmentValidationError(f"segment {si}: unknown call {ci}")
            if not call.trainable:
                raise SegmentValidationError(f"segment {si}: call {ci} is not trainable "
                                             "(exact/status/delivery_uncertain/empty)")
            p, o = len(call.prompt_ids), len(call.output_ids)
            if seg.input_ids[:p] != call.prompt_ids:
                raise SegmentValidationError(f"segment {si}: context before call {ci} differs from its prompt_ids")
            if seg.input_ids[p : p + o] != call.output_ids:
                raise SegmentValidationError(f"segment {si}: tokens after call {ci}'s prompt are not its output_ids")
            lp = seg.logprobs[p : p + o]
            _check_finite(ci, lp, f"segment {si}: ")
            if lp != call.output_logprobs:
                raise SegmentValidationError(f"segment {si}: logprobs of call {ci} do not align")
            expected_mask[p : p + o] = [1] * o
        if seg.loss_mask != expected_mask:
            bad = next(i for i, (a, b) in enumerate(zip(seg.loss_mask, expected_mask)) if a != b)
            raise SegmentValidationError(
                f"segment {si}: loss_mask is {seg.loss_mask[bad]} at token {bad}, expected {expected_mask[bad]} "
                "(mask must be 1 exactly on generated tokens)"
            )
        for i, (m, lp) in enumerate(zip(seg.loss_mask, seg.logprobs)):
            if not m and lp != 0.0:
                raise SegmentValidationError(f"segment {si}: context token {i} carries a logprob")


# --------------------------------------------------------------------------------------------
# Trajectory
# --------------------------------------------------------------------------------------------


def capture_of(calls: Iterable[ModelCall]) -> Capture:
    """``text`` when any answered call (status ``ok``) is inexact — its ids were computed from text
    after the fact — else ``tokens``. Refused and failed calls answered nothing and do not count."""
    return "text" if any(c.status == CallStatus.OK and not c.exact for c in calls) else "tokens"


class Trajectory(BaseModel):
    """One rollout: its calls, the segments built from them, status and reward (JSON version 1).

    ``capture`` is derived from the calls whenever a trajectory is made or read (:func:`capture_of`); a
    ``text`` given for exact calls is kept (a writer may know more), a ``tokens`` given for text calls is
    corrected to ``text``.
    """

    model_config = ConfigDict(extra="forbid")

    version: int = TRAJECTORY_VERSION
    rollout_id: str
    task_id: str
    harness: str | None = None
    environment: str | None = None
    status: RolloutStatus = RolloutStatus.SUCCESS
    reward: float = 0.0
    rewards: dict[str, float] = Field(default_factory=dict)
    calls: list[ModelCall] = Field(default_factory=list)
    segments: list[Segment] = Field(default_factory=list)
    metrics: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    capture: Capture = "tokens"
    #: How the harness's first request differed from its notes (system prompt fingerprint, tool
    #: names; see :mod:`openforge.harnesses.notes`); None: as noted, or no notes. Left out of the
    #: JSON when None, so files stay readable by versions without the field.
    harness_drift: dict[str, Any] | None = None

    @model_serializer(mode="wrap")
    def _drop_empty_drift(self, handler: Any) -> Any:
        data = handler(self)
        if isinstance(data, dict) and data.get("harness_drift", 0) is None:
            del data["harness_drift"]
        return data

    @model_validator(mode="after")
    def _derive_capture(self) -> Trajectory:
        if self.capture != "text":
            self.capture = capture_of(self.calls)
        return self

    @property
    def trainable(self) -> bool:
        """The outcome says something about the policy (status ``success``/``policy_failure``/``timeout``).
        A trainer also needs ``capture == "tokens"`` (:attr:`TrajectoryGroup.trainable`)."""
        return self.status.trainable

    def build(self, *, detokenize: Detokenize | None = None, train_calls: TrainCalls | None = None) -> Trajectory:
        """Return a copy with segments rebuilt from the calls and validated. ``train_calls`` (what the
        proxy's recorder passes: ``rollout.train_calls``) also labels each call with its ``origin``
        (:func:`~openforge.core.call_origin.label_origins`) and, with ``harness``, leaves ``foreign`` calls out
        of the segments (see :func:`build_segments`); ``None`` (a trajectory assembled by hand, or read
        back) labels nothing: calls labelled when recorded keep their labels, unlabelled ones are trained.

        A call with non-finite logprobs makes the copy an untrainable ``infra_error`` (a back-end
        fault, not the policy's) with no segments and the reason in ``error``; the calls are kept.
        """
        origins = label_origins(self.calls) if train_calls is not None else {}
        calls = [c if c.index not in origins or c.origin == origins[c.index]
                 else c.model_copy(update={"origin": origins[c.index]}) for c in self.calls]
        # by hand: calls that were labelled when recorded keep their labels (a foreign call stays untrained)
        labelled = bool(calls) and all(c.origin for c in calls)
        effective: TrainCalls = train_calls or ("harness" if labelled else "all")
        try:
            segments, skipped = build_segments(calls, reward=self.reward, detokenize=detokenize, train_calls=effective)
        except NonFiniteLogprobError as e:
            return self.model_copy(update={"segments": [], "status": RolloutStatus.INFRA_ERROR, "reward": 0.0, "calls": calls,
                                           "error": f"untrainable: {e}" + (f" (then: {self.error})" if self.error else "")})
        validate_segments(calls, segments)
        metrics = dict(self.metrics)
        metrics["skipped_calls"] = {str(k): v for k, v in skipped.items()}
        if train_calls is not None:
            metrics["foreign_calls"] = sorted(i for i, o in origins.items() if o == "foreign")
        return self.model_copy(update={"segments": segments, "metrics": metrics, "calls": calls})

    def validate_segments(self) -> None:
        validate_segments(self.calls, self.segments)

    def to_json(self, **kw: Any) -> str:
        return self.model_dump_json(**kw)

    @classmethod
    def from_json(cls, data: str | bytes) -> Trajectory:
        return cls.model_validate_json(data)


class TrajectoryGroup(BaseModel):
    """The rollouts of one task that GRPO normalises together."""

    model_config = ConfigDict(extra="forbid")

    task_id: str
    trajectories: list[Trajectory] = Field(default_factory=list)

    @property
    def valid(self) -> list[Trajectory]:
        """Rollouts that count for training (infra failures discarded, policy failures kept)."""
        return [t for t in self.trajectories if t.trainable]

    @property
    def trainable(self) -> list[Trajectory]:
        """The valid rollouts a trainer may use: those captured as exact tokens (``capture: tokens``)."""
        return [t for t in self.valid if t.capture == "tokens"]

    @property
    def rewards(self) -> list[float]:
        return [t.reward for t in self.valid]
