"""The declared layers of the package: the one source of ``tests/core/test_layers.py`` (which enforces
them on the import graph) and of the module table in ``docs/architecture.md`` (``python -m
openforge.devtools.archmap``).

Lowest first. A module may import its own layer or lower ones, never a higher one. The longest matching
prefix decides a module's layer; the root package (the public façade) is not layered. A package
(``openforge.core``, ``openforge.util``, ``openforge.runner``) may hold modules of several layers: its
``__init__`` imports nothing, and each module is declared by its own name. ``REGISTRY``: the
modules whose own imports may point upward (the late-binding plugin registry: it reaches the kinds it
returns only at lookup time).
"""

from __future__ import annotations

__all__ = ["LAYERS", "REGISTRY", "layer_of"]

REGISTRY = {"openforge.plugins"}
LAYERS: list[tuple[str, ...]] = [
    ("openforge.core", "openforge.core.types", "openforge.core.errors", "openforge.core.task",
     "openforge.core.outcome", "openforge.core.gemini_contents", "openforge.util", "openforge.plugins",
     "openforge.runner.task_cursor"),
    ("openforge.core.trajectory", "openforge.core.call_origin", "openforge.core.reasoning", "openforge.core.finite",
     "openforge.core.trajectory_io", "openforge.store", "openforge.readings"),
    ("openforge.proxy",),
    ("openforge.launchers", "openforge.harness", "openforge.harnesses", "openforge.environment", "openforge.envs",
     "openforge.faults", "openforge.config"),
    ("openforge.runner", "openforge.runner.harness_mix", "openforge.runner.seams", "openforge.runner.rollout",
     "openforge.runner.rollout_steps", "openforge.runner.task_selection", "openforge.runner.parts",
     "openforge.runner.session", "openforge.runner.worker_runtime", "openforge.runner.project_paths",
     "openforge.runner.run_health", "openforge.runner.content_hash", "openforge.harnesses.conformance"),
    ("openforge.train", "openforge.analysis", "openforge.atif"),
    ("openforge.runner.teacher", "openforge.runner.evaluation", "openforge.runner.heldout_eval",
     "openforge.runner.forge", "openforge.runner.run_report", "openforge.recipes", "openforge.runner.step_sampling",
     "openforge.runner.preflight"),
    ("openforge.cli", "openforge.devtools"),
]


def layer_of(mod: str) -> int | None:
    """The layer of module ``mod`` (dotted name), by the longest declared prefix; ``None`` if undeclared."""
    best: tuple[int, int] | None = None  # (prefix length, layer)
    for i, prefixes in enumerate(LAYERS):
        for pre in prefixes:
            if (mod == pre or mod.startswith(pre + ".")) and (best is None or len(pre) > best[0]):
                best = (len(pre), i)
    return best[1] if best else None
