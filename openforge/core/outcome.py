"""The one outcome rule: a rollout's status, decided once, from everything known about it.

Owns: :class:`OutcomeFacts` (what happened), :func:`classify_outcome` (-> :class:`Outcome`).

Every way a rollout ends goes through :func:`classify_outcome`: ``run_rollout`` (so ``forge
rollout``, the CPU trainer, the SFT teacher, ``forge eval`` and the veRL agent loop) and the proxy's
``POST /admin/rollouts/{id}/finish`` for drivers outside this process. The proxy's recorder hands it
the recorded calls; nothing else decides a status.

The rule — the first row that matches wins:

====  =====================================================================  ==================  =======
 #    what happened                                                          status              trained
====  =====================================================================  ==================  =======
 1    cancelled (Ctrl-C, the caller)                                         ``cancelled``       no
 2    a *final* context overflow: a model call overflowed the policy's       ``policy_failure``  yes (0)
      context (recorded as a ``context_overflow`` call) and no later call
      succeeded (it was the last call, or the harness gave up). When no
      call before it had generated anything, the prompt that did not fit
      is the task's and the harness's, not the policy's                     ``env_error``       no
      (A *recovered* overflow — a later call succeeded: the harness
      compacted and went on — decides nothing: the rows below do.)
 3    the last recorded call failed in the back-end (no later call           ``infra_error``     no
      succeeded; a failed call the SDK retried successfully does not count)
 4    the launcher, setup or verifier failed, or the sandbox was lost        as given            no
      (``infra_error`` / ``env_error`` / ``harness_error``)
 5    the budget ran out and the model is to blame: before the first model   ``infra_error``     no
      call; while the last call had produced nothing yet (no first token:
      none came, nor did its back-end estimate one); after a call
      stalled (no new token for ``stall_s`` or more); or after
      ``model_wait_share`` of the budget went to waiting for calls' *first*
      tokens (the back-end's queue and prefill). Decode time — how long
      the policy chose to talk — is the policy's and never counts
 6    the budget ran out otherwise (the policy's own doing)                  ``timeout``         yes (0)
 7    the harness failed: as its ``classify_exit`` hook says — an            as given            no
      infrastructure status (``harness_error``, ...) is discarded;
      ``policy_failure`` is honoured (e.g. the harness was killed by a       ``policy_failure``  yes (0)
      signal the launcher did not send and only another process sends:
      something in its own sandbox — the agent's commands — killed it;
      a fault/abort signal of its own is its crash, a cgroup OOM kill
      the memory limit's: :func:`openforge.harness.signal_verdict`)
 8    the verifier's reward reaches ``success_threshold``                    ``success``         yes
 9    otherwise                                                              ``policy_failure``  yes
====  =====================================================================  ==================  =======

A call's waiting is its ``first_token_s`` (the back-end's report: :mod:`openforge.proxy.timing`; a
back-end that hands whole answers over estimates it — veRL: :mod:`openforge.train.verl.latency`); a
call that produced nothing was all waiting; a call recorded without timing counts its whole latency.

An external driver's verdict (``status`` and ``reward`` given together, e.g. through
``POST /admin/rollouts/{id}/finish``) must agree with itself: :func:`check_verdict` refuses
``success`` below ``success_threshold``, ``policy_failure`` at or above it and ``timeout`` with a
reward other than 0 (the proxy answers 422 and nothing changes) rather than store a contradiction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from .types import CallStatus, ModelCall, RolloutStatus

__all__ = ["DEFAULT_MODEL_WAIT_SHARE", "DEFAULT_STALL_S", "Outcome", "OutcomeFacts", "check_verdict",
           "classify_outcome", "model_wait_s"]

S = RolloutStatus
#: A timed-out rollout whose budget went at least this much to waiting for first tokens is the back-end's doing.
DEFAULT_MODEL_WAIT_SHARE = 0.8
#: A call with no new token for this long (after its first) stalled: a timeout after it is the back-end's doing.
DEFAULT_STALL_S = 60.0
_INFRA_GIVEN = (S.INFRA_ERROR, S.ENV_ERROR, S.HARNESS_ERROR)


@dataclass(frozen=True)
class OutcomeFacts:
    """What is known when a rollout ends. ``failure`` is a status a step before the verdict already
    decided (launcher/setup/verifier/sandbox failure, or an external driver's ``status``), with
    ``error``; ``harness_status`` is the harness's own classification of its run (``None``: it ended
    normally, ``timeout``: it ran out of budget); ``reward`` is the verifier's."""

    calls: Sequence[ModelCall] = ()
    failure: RolloutStatus | None = None
    error: str | None = None
    harness_status: RolloutStatus | None = None
    harness_error: str | None = None
    reward: float | None = None
    success_threshold: float = 1.0
    budget_s: float | None = None
    cancelled: bool = False
    model_wait_share: float = DEFAULT_MODEL_WAIT_SHARE
    stall_s: float = DEFAULT_STALL_S

    def with_calls(self, calls: Sequence[ModelCall]) -> OutcomeFacts:
        return replace(self, calls=tuple(calls))


@dataclass(frozen=True)
class Outcome:
    status: RolloutStatus
    reward: float
    error: str | None = None
    rule: int = 0  # which row of the rule decided (see the module docstring)


def check_verdict(status: RolloutStatus | str | None, reward: float | None, success_threshold: float = 1.0) -> None:
    """Raise ``ValueError`` (in the driver's terms) when an external driver's ``status`` and ``reward``
    contradict each other; a status or a reward alone, or an infrastructure status, never does."""
    if status is None or reward is None:
        return
    st = RolloutStatus(status)
    if st == S.SUCCESS and reward < success_threshold:
        raise ValueError(f"status 'success' with reward {reward:g}, below success_threshold {success_threshold:g}: "
                         "a success is a reward at or above the threshold (send the reward alone, or "
                         "'policy_failure', or the success_threshold you score by)")
    if st == S.POLICY_FAILURE and reward >= success_threshold:
        raise ValueError(f"status 'policy_failure' with reward {reward:g}, at or above success_threshold "
                         f"{success_threshold:g}: that reward is a success (send the reward alone, or "
                         "the success_threshold you score by)")
    if st == S.TIMEOUT and reward != 0:
        raise ValueError(f"status 'timeout' with reward {reward:g}: a timeout is trained as reward 0 "
                         "(send reward 0 or none)")


def classify_outcome(facts: OutcomeFacts) -> Outcome:
    """Apply the rule in the module docstring."""
    calls = sorted(facts.calls, key=lambda c: c.index)
    if facts.cancelled or facts.failure == S.CANCELLED:
        return Outcome(S.CANCELLED, 0.0, facts.error or "the rollout was cancelled", 1)
    overflow = _final_overflow(calls)
    if overflow is not None:
        if not any(c.output_ids for c in calls if c.index < overflow.index):
            return Outcome(S.ENV_ERROR, 0.0, f"call {overflow.index}, before the policy had generated anything, "
                                             f"overflowed the context: the task's opening prompt and the harness's "
                                             f"do not fit ({overflow.error})", 2)
        return Outcome(S.POLICY_FAILURE, 0.0, f"call {overflow.index} overflowed the policy's context: {overflow.error}", 2)
    if calls and calls[-1].status == CallStatus.ERROR:
        why = f"the policy back-end failed on call {calls[-1].index}: {calls[-1].error}"
        return Outcome(S.INFRA_ERROR, 0.0, why + (f" (then: {facts.error})" if facts.error else ""), 3)
    if facts.failure in _INFRA_GIVEN:
        return Outcome(facts.failure, 0.0, facts.error, 4)
    if facts.harness_status == S.TIMEOUT or facts.failure == S.TIMEOUT:
        return _timeout(facts, calls)
    if facts.harness_status is not None and facts.harness_status != S.SUCCESS:
        status = S.POLICY_FAILURE if facts.harness_status.trainable else facts.harness_status
        return Outcome(status, 0.0, facts.harness_error, 7)
    reward = facts.reward if facts.reward is not None else 0.0
    if facts.failure is not None:  # an external driver said success / policy_failure itself
        return Outcome(facts.failure, reward, facts.error, 8 if facts.failure == S.SUCCESS else 9)
    if facts.reward is not None and facts.reward >= facts.success_threshold:
        return Outcome(S.SUCCESS, reward, facts.error, 8)
    return Outcome(S.POLICY_FAILURE, reward, facts.error, 9)


def _final_overflow(calls: Sequence[ModelCall]) -> ModelCall | None:
    """The last overflow, unless a later call succeeded (the harness recovered: compacted, went on)."""
    for c in reversed(calls):
        if c.status == CallStatus.OK:
            return None
        if c.status == CallStatus.CONTEXT_OVERFLOW:
            return c
    return None


def model_wait_s(call: ModelCall) -> float:
    """The seconds of ``call`` spent waiting for the model before its first token (queue + prefill):
    all of it when it produced nothing, or when it was recorded without timing."""
    if call.first_token_s is not None:
        return min(call.first_token_s, call.latency_s or call.first_token_s)
    return call.latency_s or 0.0


def _timeout(facts: OutcomeFacts, calls: Sequence[ModelCall]) -> Outcome:
    why = facts.harness_error or facts.error or "the rollout ran out of its budget"
    if not calls:
        return Outcome(S.INFRA_ERROR, 0.0, f"{why}, before the first model call (a slow start or a queue: not "
                                           "the policy's doing)", 5)
    last = calls[-1]
    if last.status == CallStatus.CANCELLED and not last.output_ids and last.first_token_s is None:
        return Outcome(S.INFRA_ERROR, 0.0, f"{why}, while call {last.index} had produced nothing (the model "
                                           "never answered)", 5)
    stalled = next((c for c in calls if (c.max_token_gap_s or 0.0) >= facts.stall_s), None)
    if stalled is not None:
        return Outcome(S.INFRA_ERROR, 0.0, f"{why}, after call {stalled.index} produced no token for "
                                           f"{stalled.max_token_gap_s:.0f}s (the model stalled: the back-end's "
                                           "doing)", 5)
    waited = sum(model_wait_s(c) for c in calls)
    if facts.budget_s and waited >= facts.model_wait_share * facts.budget_s:
        return Outcome(S.INFRA_ERROR, 0.0, f"{why}, {waited:.0f}s of the {facts.budget_s:.0f}s budget spent waiting "
                                           "for model calls' first tokens (the back-end's doing, not the policy's)", 5)
    decode = sum(max(0.0, (c.latency_s or 0.0) - model_wait_s(c)) for c in calls)
    return Outcome(S.TIMEOUT, 0.0, f"{why} ({waited:.0f}s waiting for the model's first tokens, {decode:.0f}s "
                                   "generating what the policy chose to say: the policy's own doing)", 6)
