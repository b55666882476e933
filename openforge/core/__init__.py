"""The core types every layer shares, with no dependency above them.

Holds: :mod:`~openforge.core.types` (model calls, segments, statuses), :mod:`~openforge.core.errors` (the
exception tree), :mod:`~openforge.core.task` (a task), :mod:`~openforge.core.outcome` (a rollout's outcome
taxonomy), :mod:`~openforge.core.trajectory` (trajectories and their segments),
:mod:`~openforge.core.call_origin` (which harness component made a call), :mod:`~openforge.core.reasoning`
and :mod:`~openforge.core.gemini_contents` (replayed reasoning per wire API), :mod:`~openforge.core.finite`
(the non-finite-number checks) and :mod:`~openforge.core.trajectory_io` (trajectories to and from files).

This ``__init__`` imports nothing: ``import openforge.core.task`` loads only what that module needs.
"""
