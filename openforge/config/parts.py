"""What a run is made of: the sections naming its policy (:class:`ModelConfig`), its tasks
(:class:`EnvConfig`), its harness or mix of harnesses with their options (:class:`HarnessConfig`) and
where its sandboxes come from (:class:`LauncherConfig`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_serializer, model_validator
from pydantic_core import PydanticCustomError

from .base import Section

__all__ = ["EnvConfig", "HarnessConfig", "LauncherConfig", "ModelConfig"]


class ModelConfig(Section):
    """The policy: ``smollm2-135m`` (embedded CPU default) or a local HF directory; for veRL a HF
    id or path the GPU nodes can load."""

    name: str = Field(
        "smollm2-135m", description="the policy: smollm2-135m (the embedded CPU default), a local HF model "
        "directory, a checkpoint (RUN@last, RUN@best, RUN@N, RUN@base), or for veRL a HF id the GPU nodes can "
        "load")


class EnvConfig(Section):
    """Which tasks: an environment name, its split, an optional named subset, explicit ids."""

    name: str = Field(
        "claw", description="environment: a registered name (claw, browser, desktop, a plugin), module:Class, or "
        "a task folder")
    split: Literal["train", "eval", "heldout"] = Field(
        "train", description="the split training draws its tasks from")
    subset: str | None = Field(None, description="a named subset of the environment, e.g. 'easy'")
    task_ids: list[str] | None = Field(None, description="only these task ids")
    max_tasks: int | None = Field(None, ge=1, description="at most this many tasks (after subset and task_ids)")
    options: dict[str, Any] = Field(
        default_factory=dict, description="the environment's constructor options (e.g. claw's generated, faults)")


class HarnessConfig(Section):
    """Which harness (or harnesses) and their constructor options.

    ``name`` is one harness, a list of harnesses (equal weights) or a weighted mix
    (``{react: 2, pi: 1}``): each GRPO group then runs one harness of the mix (see
    :mod:`openforge.runner.harness_mix`). ``per_harness`` holds option blocks for several harnesses
    (``{react: {max_turns: 4}, pi: {}}``). With one harness its block is merged over ``options`` at
    validation, so ``options`` is what the harness gets (``per_harness`` is not written to the resolved
    config); with a mix ``options`` are common to all and each harness gets them with its block over
    them (:meth:`options_for`; the blocks stay in the resolved config). A key set in both places to
    different values is an error, never a silent override. The options are checked against each
    chosen harness's constructor by :func:`load_config`.
    """

    name: str | list[str] | dict[str, int] = Field(
        "react", description="one harness, a list (equal weights) or a weighted mix {react: 2, pi: 1}: each GRPO "
        "group runs one of them")
    options: dict[str, Any] = Field(
        default_factory=dict, description="the harness's constructor options (forge harness list), checked with "
        "the config")
    per_harness: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="option blocks per harness name; the chosen ones are merged over options")

    def names(self) -> list[str]:
        """The chosen harnesses, in the order given."""
        return list(self.weights())

    def weights(self) -> dict[str, int]:
        """Harness → integer weight (1 each for a single name or a list)."""
        if isinstance(self.name, str):
            return {self.name: 1}
        if isinstance(self.name, list):
            return dict.fromkeys(self.name, 1)
        return dict(self.name)

    @property
    def is_mix(self) -> bool:
        return not isinstance(self.name, str)

    def block_key(self, name: str | None = None) -> str | None:
        """The ``per_harness`` key of harness ``name`` (default: the single chosen one); names compare
        like the registry's."""
        name = name if name is not None else (self.name if isinstance(self.name, str) else "")
        norm = _harness_key(name)
        return next((k for k in self.per_harness if _harness_key(k) == norm), None)

    def options_for(self, name: str) -> dict[str, Any]:
        """The constructor options harness ``name`` of this config gets."""
        if not self.is_mix:
            return dict(self.options)
        key = self.block_key(name)
        return {**self.options, **(self.per_harness[key] if key is not None else {})}

    def as_run(self) -> dict[str, list[Any]]:
        """Each chosen harness → ``[weight, options]``: what runs, whichever way the config spelled it
        (``react``, ``[react]`` and ``{react: 1}`` are equal here; cache keys use this)."""
        return {n: [w, self.options_for(n)] for n, w in self.weights().items()}

    def _clashes(self, key: str) -> list[str]:
        block = self.per_harness[key]
        return [f"options.{k}={self.options[k]!r} clashes with per_harness.{key}.{k}={v!r} (the harness's "
                f"block wins): set harness.per_harness.{key}.{k} instead"
                for k, v in block.items() if k in self.options and self.options[k] != v]

    @model_validator(mode="after")
    def _merge_block(self) -> HarnessConfig:
        if self.is_mix:
            problems = _mix_problems(self.weights(), list(self.name))
            keys = [k for k in (self.block_key(n) for n in self.names()) if k is not None]
            problems += [c for k in keys for c in self._clashes(k)]
            if problems:
                raise PydanticCustomError("harness_options", "; ".join(problems))
            return self
        key = self.block_key()
        if key is None:
            return self
        clashes = self._clashes(key)
        if clashes:
            raise PydanticCustomError("harness_options", "; ".join(clashes))
        self.options = {**self.options, **self.per_harness[key]}
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:
        out = handler(self)
        if not self.is_mix:  # one harness: its block is already merged into options
            out.pop("per_harness", None)
        return out


def _mix_problems(weights: dict[str, int], given: list[str]) -> list[str]:
    """What is wrong with a list or mix of harness names (empty, repeated, weight < 1)."""
    if not given:
        return ["name: an empty list of harnesses; give at least one"]
    problems = [f"name.{n}: weight {w!r} must be an integer >= 1" for n, w in weights.items()
                if not isinstance(w, int) or isinstance(w, bool) or w < 1]
    norm = [_harness_key(n) for n in given]
    dupes = sorted({n for n in norm if norm.count(n) > 1})
    if dupes:
        problems.append(f"name: harness {', '.join(dupes)} given more than once")
    return problems


def _harness_key(name: str) -> str:
    return name.strip().lower().replace("_", "-")


class LauncherConfig(Section):
    name: str = Field(
        "local", description="where sandboxes come from: local (bubblewrap) or kubernetes (a pod per rollout)")
    options: dict[str, Any] = Field(
        default_factory=dict, description="the launcher's options (e.g. isolation, ro_binds; namespace, image "
        "for kubernetes)")
