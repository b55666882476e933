"""LoRA for the CPU trainer (``trainer.cpu.lora``), through ``peft`` (imported lazily).

Owns: :func:`attach` (inject the adapter into the served module, once), :func:`adapter_params`,
:func:`save_adapter` / :func:`load_adapter` (a checkpoint's adapter, in PEFT's own format),
:func:`adapter_state` (the adapter's tensors alone, for the SFT cache and the KL reference),
:func:`set_adapter_base`; re-exported from below it: :func:`is_adapter_dir`, :func:`adapter_base`
(:mod:`openforge.util.modeldir`) and :func:`load_merged` (base + adapter merged into a plain ``transformers``
model: ``RUN@N``, ``forge eval``, ``forge export model``; :mod:`openforge.proxy.backends.hf_loading`).

One module, shared. ``peft`` injects its LoRA layers *into* the model it is given: the back-end serves
that very module, so after each optimizer step the rollouts sample from base + the updated adapter with
no copy, and the back-end's weight-version checks (prefix KV cache, packed linears) see the adapter's
parameters change like any other. The trainer's AdamW holds only the adapter's parameters.

Checkpoints. A LoRA checkpoint ``step-N`` holds ``adapter_config.json`` (its ``base_model_name_or_path``
names the run's starting model, resolved when saved) and ``adapter_model.safetensors``, next to the
tokenizer, chat template and ``openforge.json`` every checkpoint has. Loading it as a model loads the base
and merges the adapter in (:func:`load_merged`): logits equal the trainer's unmerged module up to float
rounding.

SFT. The warm-start trains the same adapter (its trainer finds the one already attached), so the base
stays the run's starting model and every checkpoint is that base plus one adapter.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..core.errors import ConfigError
from ..proxy.backends.hf_loading import load_merged
from ..util.modeldir import ADAPTER_CONFIG, ADAPTER_WEIGHTS, adapter_base, is_adapter_dir

__all__ = [
    "ADAPTER_CONFIG",
    "ADAPTER_WEIGHTS",
    "adapter_base",
    "adapter_params",
    "adapter_state",
    "attach",
    "has_adapter",
    "is_adapter_dir",
    "load_adapter",
    "load_merged",
    "save_adapter",
    "set_adapter_base",
]

_PEFT = "_openforge_peft"  # the PeftModel wrapping a module (a plain attribute, not a submodule)


def _peft() -> Any:
    try:
        import peft
    except ImportError:
        from ..util.extras import pip_install

        raise ConfigError(f"trainer.cpu.lora needs peft ({pip_install('cpu')})") from None
    return peft


def has_adapter(model: Any) -> bool:
    """Whether :func:`attach` injected an adapter into ``model``."""
    return model.__dict__.get(_PEFT) is not None


def attach(model: Any, cfg: Any) -> Any:
    """Inject a LoRA adapter (``cfg``: :class:`~openforge.config.LoraConfig`) into ``model`` in place and
    return its ``PeftModel``; a model that already has one (the SFT warm-start's trainer, then GRPO's)
    keeps it. Only the adapter's parameters require gradients afterwards."""
    existing = model.__dict__.get(_PEFT)
    if existing is not None:
        return existing
    peft = _peft()
    pcfg = peft.LoraConfig(r=cfg.rank, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout,
                           target_modules=cfg.target_modules, bias="none", task_type="CAUSAL_LM")
    try:
        wrapped = peft.get_peft_model(model, pcfg)
    except ValueError as e:  # target modules not found, unsupported layer types
        raise ConfigError(f"trainer.cpu.lora: {e}") from None
    model.__dict__[_PEFT] = wrapped  # not model.x = ...: nn.Module would register it as a submodule
    return wrapped


def adapter_params(model: Any) -> list[Any]:
    """The adapter's parameters (what AdamW trains), in module order."""
    return [p for n, p in model.named_parameters() if "lora_" in n]


def adapter_state(model: Any) -> dict[str, Any]:
    """The adapter's tensors by their names in ``model`` (detached, contiguous)."""
    return {n: p.detach().contiguous() for n, p in model.named_parameters() if "lora_" in n}


def save_adapter(model: Any, path: Path) -> None:
    """Write the adapter of ``model`` into ``path`` (PEFT's format: adapter_config.json + weights)."""
    model.__dict__[_PEFT].save_pretrained(str(path))


def load_adapter(model: Any, path: Path) -> None:
    """Load the adapter weights saved in ``path`` into ``model``'s adapter; every adapter tensor must match."""
    from safetensors.torch import load_file

    peft = _peft()
    f = path / ADAPTER_WEIGHTS
    if not f.is_file():
        raise ConfigError(f"checkpoint {path} holds no LoRA adapter ({ADAPTER_WEIGHTS}) but trainer.cpu.lora is "
                          "set: it was written by full fine-tuning; resume with trainer.cpu.lora=null or use a "
                          "new run_dir")
    wrapped = model.__dict__[_PEFT]
    try:
        res = peft.set_peft_model_state_dict(wrapped, load_file(str(f)))
    except RuntimeError as e:  # shapes differ: another rank or another model
        raise ConfigError(f"checkpoint {path}: its LoRA adapter does not fit trainer.cpu.lora ({e})"[:600]) from None
    missing = [k for k in res.missing_keys if "lora_" in k]
    if missing or res.unexpected_keys:
        raise ConfigError(f"checkpoint {path}: its LoRA adapter does not fit trainer.cpu.lora (target modules "
                          f"differ): missing {missing[:3]}, unexpected {list(res.unexpected_keys)[:3]}")


def set_adapter_base(path: str | Path, name: str) -> None:
    """Name the base model in ``path``'s adapter config: an alias as it is, ``RUN@N`` or a directory as the
    absolute path it resolves to now (a run that continues later does not change this checkpoint's base)."""
    import json

    from ..proxy.backends.hf_loading import SMOLLM2_ALIASES
    from ..util.modeldir import resolve_model_name

    if name.lower() not in SMOLLM2_ALIASES:
        resolved = resolve_model_name(name)
        p = Path(resolved).expanduser()
        name = str(p.resolve()) if p.exists() else resolved
    f = Path(path) / ADAPTER_CONFIG
    cfg = json.loads(f.read_text())
    cfg["base_model_name_or_path"] = name
    f.write_text(json.dumps(cfg, indent=2, sort_keys=True))
