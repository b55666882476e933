"""Evaluation and behaviour analysis of agent runs (``forge eval``, ``forge compare``, ``forge report``).

Modules: ``steps`` (recorded calls → tool steps), ``actions`` (what a step wrote or read),
``metrics`` (behaviour metrics), ``passk`` (pass@k / pass^k, eval summaries), ``rundir`` (reading a
run directory), ``compare`` (side-by-side tables), ``clustered`` (intervals over instances × seeds), ``view`` / ``svg`` / ``report`` (the self-contained
HTML report). Definitions of every number: docs/metrics.md. Running an eval's rollouts is not
analysis: :mod:`openforge.runner.evaluation`.
"""

from __future__ import annotations

from ..readings.steps import ToolStep, extract_steps
from .metrics import BehaviourSummary, RolloutBehaviour, rollout_behaviour, summarize_behaviour
from .passk import EvalSummary, pass_at_k, pass_hat_k, summarize_eval
from .rundir import RunData, load_run

__all__ = [
    "BehaviourSummary",
    "EvalSummary",
    "RolloutBehaviour",
    "RunData",
    "ToolStep",
    "extract_steps",
    "load_run",
    "pass_at_k",
    "pass_hat_k",
    "rollout_behaviour",
    "summarize_behaviour",
    "summarize_eval",
]
