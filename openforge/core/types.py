"""Core data types that cross every boundary: one recorded model call, one training segment,
and the rollout status taxonomy.

Owns: :class:`ModelCall`, :class:`Segment`, :class:`RolloutStatus`, :class:`CallStatus`,
:class:`BreakReason`. Pure data (pydantic v2), no I/O. The JSON shape is DESIGN's trajectory
contract, version 1.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "TRAJECTORY_VERSION",
    "BreakReason",
    "CallStatus",
    "Capture",
    "ModelCall",
    "RolloutStatus",
    "Segment",
    "ServedAPI",
    "WireAPI",
]

TRAJECTORY_VERSION = 1

#: The model APIs the proxy serves: a wire adapter's ``api``, a canonical request's ``api``.
ServedAPI = Literal["chat", "responses", "messages", "gemini"]
#: A recorded call's ``api``.
WireAPI = Literal["chat", "responses", "messages", "gemini", "completions", "unknown"]
#: How a trajectory's generated tokens were captured: ``tokens`` (the exact ids the policy sampled, with
#: their logprobs) or ``text`` (at least one answer came back as text and was tokenized after the fact).
Capture = Literal["tokens", "text"]


class _StrEnum(str, Enum):
    """``enum.StrEnum`` for Python 3.10: members compare and serialise as their value."""

    def __str__(self) -> str:
        return str(self.value)


class RolloutStatus(_StrEnum):
    """How a rollout ended.

    ``success`` / ``policy_failure`` / ``timeout`` are the policy's doing and are trained on
    (a timeout is a wall-clock budget the policy overran, reward 0). ``harness_error``,
    ``env_error``, ``infra_error`` and ``cancelled`` are infrastructure failures: discarded,
    never scored 0.
    """

    SUCCESS = "success"
    POLICY_FAILURE = "policy_failure"
    TIMEOUT = "timeout"
    HARNESS_ERROR = "harness_error"
    ENV_ERROR = "env_error"
    INFRA_ERROR = "infra_error"
    CANCELLED = "cancelled"

    @property
    def trainable(self) -> bool:
        """True for outcomes that say something about the policy (kept for training)."""
        return self in _TRAINABLE

    @property
    def is_infra_failure(self) -> bool:
        return not self.trainable


_TRAINABLE = frozenset({RolloutStatus.SUCCESS, RolloutStatus.POLICY_FAILURE, RolloutStatus.TIMEOUT})


class CallStatus(_StrEnum):
    """Outcome of one model call served by the proxy."""

    OK = "ok"
    ERROR = "error"  # back-end error or timeout: an infra failure of the call
    CANCELLED = "cancelled"  # client went away mid-generation (the tokens generated so far are kept)
    CONTEXT_OVERFLOW = "context_overflow"  # the prompt no longer fit the policy's context: refused, the policy's doing


class BreakReason(_StrEnum):
    """Why a new training segment began (DESIGN: segment ``break_reason``)."""

    FIRST = "first"
    NEW_LINEAGE = "new_lineage"
    HISTORY_REWRITTEN = "history_rewritten"
    THINKING_STRIPPED = "thinking_stripped"
    TEMPLATE_DRIFT = "template_drift"
    RETRY = "retry"


class ModelCall(BaseModel):
    """One model API call as served and recorded by the proxy.

    ``prompt_ids`` are the exact tokens the policy was conditioned on and ``output_ids`` the
    exact tokens it generated, with ``output_logprobs`` aligned one-to-one (behaviour policy).
    ``exact`` is false when the ids were computed after the fact (a teacher API that returns
    text only): such calls are fit for SFT export, never for RL.

    ``delivery_uncertain`` is true when the proxy cannot vouch that the client received the whole
    answer: the call was recorded (durably, before the reply) but the reply was cut off — the client
    went away, the connection broke, or the proxy died while sending it. Such a call is kept, and its
    tokens are never trained (the policy's next action may not have been conditioned on them).
    """

    model_config = ConfigDict(extra="forbid")

    index: int
    api: WireAPI = "chat"
    request: dict[str, Any] = Field(default_factory=dict)
    response: dict[str, Any] = Field(default_factory=dict)
    prompt_ids: list[int] = Field(default_factory=list)
    output_ids: list[int] = Field(default_factory=list)
    output_logprobs: list[float] = Field(default_factory=list)
    exact: bool = True
    finish_reason: str | None = None
    started_at: float = 0.0
    latency_s: float = 0.0
    # Where the call's time went, as the back-end reports it (None: not reported; a record written
    # before these fields existed). ``queued_s``: seconds from the call reaching the back-end until
    # the back-end admitted it to generation (its own queue). ``first_token_s``: seconds from the call
    # reaching the back-end until its first generated token (queue + prefill: the server's time; the
    # rest of ``latency_s`` is decode, whose length the policy chose). ``max_token_gap_s``: the
    # longest stretch after the first token with no new token, up to the call's end (a stall).
    queued_s: float | None = None
    first_token_s: float | None = None
    max_token_gap_s: float | None = None
    status: CallStatus = CallStatus.OK
    error: str | None = None
    model: str | None = None
    # Number of leading prompt tokens that render the lineage-defining prefix (tools + the
    # leading system/developer messages). Set by the renderer; used to tell a rewritten history
    # of the same agent (`history_rewritten`) from another agent (`new_lineage`).
    system_prefix_len: int | None = None
    # True when the generated output contained reasoning (e.g. a <think> block).
    has_reasoning: bool = False
    sampling: dict[str, Any] = Field(default_factory=dict)
    delivery_uncertain: bool = False
    # Whether the client asked for a streamed answer (``"stream": true``, or the Gemini wire's
    # ``:streamGenerateContent`` path, where the body says nothing). None: a record written before the
    # field existed (:meth:`was_streamed` then reads the request body).
    streamed: bool | None = None
    # The version of the policy that sampled this call, as its back-end reports it (a training run counts
    # its published policies: 0 is the one it starts from, N the one after the N-th update; a vLLM engine's
    # adapter ``policy-vN``). None: not versioned (a back-end that does not say, a record written before the
    # field existed). A trainer refuses a call whose version is not the one it trains (stale).
    policy_version: int | None = None
    # Who made the call (:mod:`openforge.core.call_origin`): ``harness``, or ``foreign`` (another process in
    # the sandbox, e.g. a tool script calling the proxy URL). Set when segments are built; ``None`` in a
    # record written before the label existed (read as ``harness``).
    origin: Literal["harness", "foreign"] | None = None

    @model_validator(mode="after")
    def _check_logprobs(self) -> ModelCall:
        if self.output_logprobs and len(self.output_logprobs) != len(self.output_ids):
            raise ValueError(
                f"call {self.index}: {len(self.output_logprobs)} logprobs for {len(self.output_ids)} output tokens"
            )
        return self

    @property
    def trainable(self) -> bool:
        """An exact call with generated tokens and their logprobs that ended ``ok`` and whose reply went
        out whole (not ``delivery_uncertain``), or that was cancelled mid-generation (the tokens sampled
        before the cancel are the policy's, kept as they were: known undelivered, not uncertain)."""
        return (
            self.exact
            and (self.status == CallStatus.CANCELLED or (self.status == CallStatus.OK and not self.delivery_uncertain))
            and bool(self.output_ids)
            and len(self.output_logprobs) == len(self.output_ids)
        )

    def was_streamed(self) -> bool:
        """Whether the client asked for a streamed answer, on any wire (older records: from the body)."""
        return self.streamed if self.streamed is not None else bool((self.request or {}).get("stream"))


class Segment(BaseModel):
    """One training sequence: ``input_ids`` with ``loss_mask`` 1 exactly on policy-generated tokens.

    ``logprobs`` has one entry per input token: the behaviour logprob under mask 1, 0.0 elsewhere.
    ``call_indices`` are the calls whose generated tokens this segment trains, in order.
    """

    model_config = ConfigDict(extra="forbid")

    input_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float]
    call_indices: list[int]
    break_reason: BreakReason
    reward: float = 0.0

    @model_validator(mode="after")
    def _check_lengths(self) -> Segment:
        n = len(self.input_ids)
        if len(self.loss_mask) != n or len(self.logprobs) != n:
            raise ValueError(
                f"segment lengths differ: input_ids={n} loss_mask={len(self.loss_mask)} logprobs={len(self.logprobs)}"
            )
        return self

    @property
    def num_trained_tokens(self) -> int:
        return sum(self.loss_mask)
