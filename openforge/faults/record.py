"""Recording on the trajectory whether each injected fault was met and recovered from.

Owns: :func:`record_faults` — adds ``metadata["faults"]["outcomes"]`` (one
:class:`~openforge.readings.recovery.FaultOutcome` per armed fault, in the order of ``injected``)
and ``metadata["faults"]["met"]`` / ``["recovered"]`` (counts) to a finished trajectory.
"""

from __future__ import annotations

from ..core.trajectory import Trajectory
from ..readings.recovery import fault_outcomes

__all__ = ["record_faults"]


def record_faults(traj: Trajectory) -> Trajectory:
    faults = dict(traj.metadata.get("faults") or {})
    outs = fault_outcomes(traj)
    faults.update(outcomes=[o.model_dump() for o in outs], met=sum(o.met for o in outs),
                  recovered=sum(o.recovered for o in outs))
    return traj.model_copy(update={"metadata": {**traj.metadata, "faults": faults}})
