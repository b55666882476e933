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
 2    a model call overflowed the policy's context (the prompt the policy    ``policy_failure``  yes (0)
      built no longer fits: recorded as a ``context_overflow`` call)
 3    the last recorded call failed in the back-end (no later call           ``infra_error``     no
      succeeded; a failed call the SDK retried successfully does not count)
 4    the launcher, setup or verifier failed, or the sandbox was lost        as given            no
      (``infra_error`` / ``env_error`` / ``harness_error``)
 5    the budget ran out before the first model call, while a model call     ``infra_error``     no
      had produced nothing yet, or after ``model_wait_share`` of it went
      to waiting on model calls
 6    the budget ran out otherwise (the policy's own doing)                  ``timeout``         yes (0)
 7    the harness failed (its ``classify_exit`` hook says how)               ``harness_error``   no
 8    the verifier's reward reaches ``success_threshold``                    ``success``         yes
 9    otherwise                                                              ``policy_failure``  yes
====  =====================================================================  ==================  =======
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from .types import CallStatus, ModelCall, RolloutStatus

__all__ = ["DEFAULT_MODEL_WAIT_SHARE", "Outcome", "OutcomeFacts", "classify_outcome"]

S = RolloutStatus
#: A timed-out rollout whose budget went at least this much to model calls is the back-end's doing.
DEFAULT_MODEL_WAIT_SHARE = 0.8
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

    def with_calls(self, calls: Sequence[ModelCall]) -> OutcomeFacts:
        return replace(self, calls=tuple(calls))


@dataclass(frozen=True)
class Outcome:
    status: RolloutStatus
    reward: float
    error: str | None = None
    rule: int = 0  # which row of the rule decided (see the module docstring)


def classify_outcome(facts: OutcomeFacts) -> Outcome:
    """Apply the rule in the module docstring."""
    calls = sorted(facts.calls, key=lambda c: c.index)
    if facts.cancelled or facts.failure == S.CANCELLED:
        return Outcome(S.CANCELLED, 0.0, facts.error or "the rollout was cancelled", 1)
    overflow = next((c for c in calls if c.status == CallStatus.CONTEXT_OVERFLOW), None)
    if overflow is not None:
        return Outcome(S.POLICY_FAILURE, 0.0, f"call {overflow.index} overflowed the policy's context: {overflow.error}", 2)
    if calls and calls[-1].status == CallStatus.ERROR:
        why = f"the policy back-end failed on call {calls[-1].index}: {calls[-1].error}"
        return Outcome(S.INFRA_ERROR, 0.0, why + (f" (then: {facts.error})" if facts.error else ""), 3)
    if facts.failure in _INFRA_GIVEN:
        return Outcome(facts.failure, 0.0, facts.error, 4)
    if facts.harness_status == S.TIMEOUT or facts.failure == S.TIMEOUT:
        return _timeout(facts, calls)
    if facts.harness_status is not None:
        return Outcome(S.HARNESS_ERROR if facts.harness_status.trainable else facts.harness_status, 0.0,
                       facts.harness_error, 7)
    reward = facts.reward if facts.reward is not None else 0.0
    if facts.failure is not None:  # an external driver said success / policy_failure itself
        return Outcome(facts.failure, reward, facts.error, 8 if facts.failure == S.SUCCESS else 9)
    if facts.reward is not None and facts.reward >= facts.success_threshold:
        return Outcome(S.SUCCESS, reward, facts.error, 8)
    return Outcome(S.POLICY_FAILURE, reward, facts.error, 9)


def _timeout(facts: OutcomeFacts, calls: Sequence[ModelCall]) -> Outcome:
    why = facts.harness_error or facts.error or "the rollout ran out of its budget"
    if not calls:
        return Outcome(S.INFRA_ERROR, 0.0, f"{why}, before the first model call (a slow start or a queue: not "
                                           "the policy's doing)", 5)
    last = calls[-1]
    if last.status == CallStatus.CANCELLED and not last.output_ids:
        return Outcome(S.INFRA_ERROR, 0.0, f"{why}, while call {last.index} had produced nothing (the model "
                                           "never answered)", 5)
    waited = sum(c.latency_s or 0.0 for c in calls)
    if facts.budget_s and waited >= facts.model_wait_share * facts.budget_s:
        return Outcome(S.INFRA_ERROR, 0.0, f"{why}, {waited:.0f}s of the {facts.budget_s:.0f}s budget spent waiting "
                                           "on model calls (the back-end's doing, not the policy's)", 5)
    return Outcome(S.TIMEOUT, 0.0, why, 6)
