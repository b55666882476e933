"""openforge: train LLM agents inside the real harness they are deployed with.

The public API is what ``__all__`` lists; everything else is internal and may change.

The package: :mod:`openforge.core` (the data types: tasks, trajectories, outcomes, errors),
:mod:`openforge.util` (helpers with no openforge dependencies of note), :mod:`openforge.runner` (the run
layer: a run, its sessions and rollouts, evaluation), beside the subsystems (``proxy``, ``launchers``,
``harnesses``, ``envs``, ``train``, ``store``, ...). The modules that lived at the top before that layout
(``openforge.trajectory``, ``openforge.rollout``, ...) still import under their old names: a finder
(:data:`_MOVED`) hands out the very module object of the new path.
"""

from __future__ import annotations

__version__ = "0.1.0"

import sys as _sys

from .core.errors import (
    AgentOutputError,
    ConfigError,
    ForgeError,
    SandboxError,
    SandboxFileNotFound,
    SandboxFileRefused,
    StoreError,
)
from .core.task import Task
from .core.trajectory import (
    SegmentValidationError,
    Trajectory,
    TrajectoryGroup,
    build_segments,
    validate_segments,
)
from .core.types import BreakReason, CallStatus, ModelCall, RolloutStatus, Segment
from .harness import Harness, HarnessResult, RolloutContext

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
_LAZY = {"run": "runner.forge", "arun": "runner.forge", "Forge": "runner.forge", "RunConfig": "config",
         "load_config": "config", "Environment": "environment", "VerifyResult": "environment",
         "make_environment": "plugins", "make_harness": "plugins", "run_rollout": "runner.rollout",
         "run_groups": "runner.rollout", "RolloutRequest": "runner.rollout", "GroupRequest": "runner.rollout",
         "Session": "runner.session", "TooManyRolloutErrors": "runner.run_health",
         "NothingTrainable": "runner.run_health", "Sandbox": "launchers.base",
         "to_atif": "atif", "from_atif": "atif", "write_atif": "atif", "read_atif": "atif"}
__all__ += list(_LAZY)
__all__ += ["get_environment"]  # deprecated alias of make_environment (same behaviour: an instance)


def __getattr__(name: str):
    if name == "get_environment":
        import warnings

        warnings.warn("openforge.get_environment is deprecated: use openforge.make_environment (an instance) "
                      "or openforge.plugins.environment_class (the class)", DeprecationWarning, stacklevel=2)
        name = "make_environment"
    if f"{__name__}.{name}" in _MOVED:  # openforge.trajectory without importing it: the moved module
        import importlib

        return importlib.import_module(_MOVED[f"{__name__}.{name}"])
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'openforge' has no attribute {name!r}")


#: The modules moved from the top of the package into ``core``/``util``/``runner``: old name → new name.
#: Importing an old name (``import openforge.trajectory``, ``from openforge.task import Task``,
#: ``importlib.import_module("openforge.rollout")``, ``mock.patch("openforge.rollout.x")``) gives the
#: module of the new name itself, so classes keep one identity and a patch reaches the real module.
#: Code inside openforge uses the new names only (``tests/core/test_moved_modules.py`` checks).
_MOVED = {f"openforge.{old}": f"openforge.{pkg}.{old}" for pkg, olds in {
    "core": ("types", "errors", "task", "outcome", "trajectory", "call_origin", "reasoning", "finite",
             "trajectory_io", "gemini_contents"),
    "util": ("heap", "atomicdir", "console", "extras", "paths", "overrides", "modeldir", "serving"),
    "runner": ("forge", "session", "parts", "rollout", "step_sampling", "teacher", "evaluation", "heldout_eval",
               "preflight", "run_health", "worker_runtime", "task_selection", "harness_mix", "seams",
               "task_cursor", "project_paths", "content_hash"),
}.items() for old in olds}


class _MovedLoader:
    """Loads an old module name as the module of its new name (no second copy); ``python -m`` on an old
    name runs the new module's code (``get_code``)."""

    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec):
        import importlib

        module = importlib.import_module(self.new)
        self._spec = module.__spec__  # the import system sets the alias's spec on it: put it back
        return module

    def exec_module(self, module) -> None:
        module.__spec__ = self._spec

    def get_code(self, fullname: str):
        import importlib.util

        spec = importlib.util.find_spec(self.new)
        return spec.loader.get_code(self.new)  # type: ignore[union-attr]

    def is_package(self, fullname: str) -> bool:
        return False


class _MovedFinder:
    """A ``sys.meta_path`` finder for the names in :data:`_MOVED` (nothing else)."""

    @staticmethod
    def find_spec(fullname: str, path=None, target=None):
        new = _MOVED.get(fullname)
        if new is None:
            return None
        import importlib.machinery
        import importlib.util

        found = importlib.util.find_spec(new)  # the new module's file (runpy's __file__), without running it
        return importlib.machinery.ModuleSpec(fullname, _MovedLoader(new), origin=found.origin if found else None)


if not any(type(f).__name__ == "_MovedFinder" for f in _sys.meta_path):  # once, even if reloaded
    _sys.meta_path.insert(0, _MovedFinder())
