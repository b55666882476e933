"""Declarative fault injection for an error-recovery curriculum.

Faults are declared per run (``env.options.faults``) or per task (``[[faults]]`` in task.toml),
seeded per task group (:mod:`.spec`), injected around any environment (:mod:`.env`: an HTTP
forwarder in front of its services, :mod:`.forwarder`; files and command shims, :mod:`.inject`) and
recorded on the trajectory with whether the agent met and recovered from each (:mod:`.record`;
metrics in :mod:`openforge.readings.recovery`).
"""

from .env import FaultyEnvironment, with_faults
from .spec import KINDS, FaultConfig, FaultSpec, parse_fault_config, parse_faults, plan_faults

__all__ = ["KINDS", "FaultConfig", "FaultSpec", "FaultyEnvironment", "parse_fault_config", "parse_faults",
           "plan_faults", "with_faults"]
