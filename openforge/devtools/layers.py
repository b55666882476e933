"""The declared layers of the package: the one source of ``tests/core/test_layers.py`` (which enforces
them on the import graph) and of the module table in ``docs/architecture.md`` (``python -m
openforge.devtools.archmap``).

Lowest first. A module may import its own layer or lower ones, never a higher one. The longest matching
prefix decides a module's layer; the root package (the public façade) is not layered. ``REGISTRY``: the
modules whose own imports may point upward (the late-binding plugin registry: it reaches the kinds it
returns only at lookup time).
"""

from __future__ import annotations

__all__ = ["LAYERS", "REGISTRY", "layer_of"]

REGISTRY = {"openforge.plugins"}
LAYERS: list[tuple[str, ...]] = [
    ("openforge.types", "openforge.errors", "openforge.heap", "openforge.task", "openforge.outcome", "openforge.plugins", "openforge.atomicdir",
     "openforge.console", "openforge.extras", "openforge.paths", "openforge.modeldir", "openforge.serving",
     "openforge.overrides",
     "openforge.task_cursor", "openforge.gemini_contents"),
    ("openforge.trajectory", "openforge.call_origin", "openforge.reasoning", "openforge.finite", "openforge.trajectory_io", "openforge.store",
     "openforge.readings"),
    ("openforge.proxy",),
    ("openforge.launchers", "openforge.harness", "openforge.harnesses", "openforge.environment", "openforge.envs",
     "openforge.faults", "openforge.config"),
    ("openforge.harness_mix", "openforge.seams", "openforge.rollout", "openforge.task_selection", "openforge.parts",
     "openforge.session", "openforge.worker_runtime", "openforge.project_paths", "openforge.run_health",
     "openforge.content_hash", "openforge.harnesses.conformance"),
    ("openforge.train", "openforge.analysis", "openforge.atif"),
    ("openforge.teacher", "openforge.evaluation", "openforge.heldout_eval", "openforge.forge", "openforge.recipes",
     "openforge.step_sampling", "openforge.preflight"),
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
