"""openforge: train LLM agents inside the real harness they are deployed with.

The public API is what ``__all__`` lists; everything else is internal and may change.
"""

from __future__ import annotations

__version__ = "0.1.0"

from .errors import (
    AgentOutputError,
    ConfigError,
    ForgeError,
    SandboxError,
    SandboxFileNotFound,
    SandboxFileRefused,
    StoreError,
)
from .harness import Harness, HarnessResult, RolloutContext
from .task import Task
from .trajectory import (
    SegmentValidationError,
    Trajectory,
    TrajectoryGroup,
    build_segments,
    validate_segments,
)
from .types import BreakReason, CallStatus, ModelCall, RolloutStatus, Segment

__all__ = [
    "AgentOutputError",
    "BreakReason",
    "CallStatus",
    "ConfigError",
    "ForgeError",
    "Harness",
    "HarnessResult",
    "ModelCall",
    "RolloutContext",
    "RolloutStatus",
    "SandboxError",
    "SandboxFileNotFound",
    "SandboxFileRefused",
    "Segment",
    "SegmentValidationError",
    "StoreError",
    "Task",
    "Trajectory",
    "TrajectoryGroup",
    "__version__",
    "build_segments",
    "validate_segments",
]

# Training entry points, imported on first use so `import openforge` stays light.
_LAZY = {"run": "forge", "arun": "forge", "Forge": "forge", "RunConfig": "config", "load_config": "config",
         "Environment": "environment", "VerifyResult": "environment", "make_environment": "plugins",
         "make_harness": "plugins", "run_rollout": "rollout", "run_groups": "rollout", "RolloutRequest": "rollout",
         "GroupRequest": "rollout", "Session": "session", "TooManyRolloutErrors": "run_health",
         "NothingTrainable": "run_health", "Sandbox": "launchers.base",
         "to_atif": "atif", "from_atif": "atif", "write_atif": "atif", "read_atif": "atif"}
__all__ += list(_LAZY)
__all__ += ["get_environment"]  # deprecated alias of make_environment (same behaviour: an instance)


def __getattr__(name: str):
    if name == "get_environment":
        import warnings

        warnings.warn("openforge.get_environment is deprecated: use openforge.make_environment (an instance) "
                      "or openforge.plugins.environment_class (the class)", DeprecationWarning, stacklevel=2)
        name = "make_environment"
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'openforge' has no attribute {name!r}")
