"""What makes a directory a usable model, and the openforge metadata a trained one carries.

Owns: :data:`META_FILE` (``openforge.json``), :class:`ModelMeta` (run, step, recipe, harnesses, the
tool-call parser to serve it with, base model, the SHA-256 of the chat template that rendered its
training prompts), :func:`read_meta`, :func:`missing_parts` and :func:`check_model_dir` (a clear
:class:`~openforge.core.errors.ConfigError` naming what is missing, before transformers raises a traceback),
:data:`BASE_MODEL_IDS` (the Hugging Face id of a built-in alias, for model cards), :func:`resolve_checkpoint` /
:func:`resolve_model_name` (``RUN@last`` / ``@best`` / ``@N`` / ``@base``: a run's checkpoint as a model, for
every ``transformers:`` spec and ``model.name``).

A complete model directory holds ``config.json``, weights (``*.safetensors`` or ``pytorch_model*.bin``),
a tokenizer (``tokenizer.json``, or ``tokenizer.model`` / ``vocab.json`` + ``merges.txt``, with
``tokenizer_config.json``) and, for a model openforge trained, ``chat_template.jinja`` (the exact
template, tools included, that rendered its training prompts) and ``openforge.json``. A LoRA checkpoint
(``trainer.cpu.lora``) holds ``adapter_config.json`` (naming its base model) and
``adapter_model.safetensors`` instead of ``config.json`` and weights; loading it merges the adapter into its
base (:func:`openforge.train.lora.load_merged`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..core.errors import ConfigError

__all__ = [
    "ADAPTER_CONFIG",
    "ADAPTER_WEIGHTS",
    "BASE_MODEL_IDS",
    "CHAT_TEMPLATE_FILE",
    "META_FILE",
    "ModelMeta",
    "adapter_base",
    "check_model_dir",
    "is_adapter_dir",
    "missing_parts",
    "read_meta",
    "resolve_checkpoint",
    "resolve_model_name",
    "template_sha256",
]

META_FILE = "openforge.json"
INDEX_FILE = "index.json"  # checkpoints/index.json: which weights each GRPO step left (openforge.train.checkpoint)
INITIAL = "initial"  # an index entry whose weights are the run's starting model
CHAT_TEMPLATE_FILE = "chat_template.jinja"
#: Files of a checkpoint that only resuming a run needs (never part of an exported model).
ADAPTER_CONFIG = "adapter_config.json"  # a LoRA checkpoint (openforge.train.lora)
ADAPTER_WEIGHTS = "adapter_model.safetensors"
TRAINER_ONLY_FILES = ("trainer_state.pt", "trainer.json", "reference.safetensors")
BASE_MODEL_IDS = {"smollm2-135m": "HuggingFaceTB/SmolLM2-135M-Instruct",
                  "smollm2-135m-instruct": "HuggingFaceTB/SmolLM2-135M-Instruct",
                  "smollm2": "HuggingFaceTB/SmolLM2-135M-Instruct",
                  "default": "HuggingFaceTB/SmolLM2-135M-Instruct"}


class ModelMeta(BaseModel):
    """``openforge.json``: where a trained model comes from and how to serve it."""

    model_config = ConfigDict(extra="allow")

    format: int = 1
    run: str = Field(description="run directory name")
    run_dir: str
    step: int = Field(description="GRPO steps done when these weights were saved (0: after the SFT warm-start)")
    recipe: str
    algorithm: str
    harnesses: list[str]
    environment: str
    tool_call_parser: str = Field(description="parser of the model's tool calls (vLLM --tool-call-parser)")
    base_model: str = Field(description="the model training started from (Hugging Face id when known)")
    init_model: str = Field(description="model.name of the run (alias, path or id)")
    chat_template_sha256: str
    openforge_version: str
    created_at: str


def template_sha256(template: str) -> str:
    return hashlib.sha256(template.encode("utf-8")).hexdigest()


def read_meta(path: str | Path) -> ModelMeta | None:
    """The directory's ``openforge.json``, or None when it has none."""
    f = Path(path) / META_FILE
    if not f.is_file():
        return None
    try:
        return ModelMeta.model_validate_json(f.read_text())
    except ValueError as e:
        raise ConfigError(f"{f}: not a valid openforge model metadata file ({e})") from None


def is_adapter_dir(path: str | Path) -> bool:
    """Whether ``path`` holds a LoRA adapter checkpoint (rather than full weights)."""
    return (Path(path) / ADAPTER_CONFIG).is_file()


def adapter_base(path: str | Path) -> str:
    """The base model an adapter directory was trained on (its ``base_model_name_or_path``)."""
    cfg = json.loads((Path(path) / ADAPTER_CONFIG).read_text())
    base = cfg.get("base_model_name_or_path")
    if not base:
        raise ConfigError(f"{path}/{ADAPTER_CONFIG} names no base model (base_model_name_or_path)")
    return str(base)


def _has_weights(p: Path) -> bool:
    names = {f.name for f in p.iterdir() if f.is_file()}
    weights = {n for n in names if n.endswith(".safetensors") and n != "reference.safetensors"}
    return bool(weights or "pytorch_model.bin" in names or "model.safetensors.index.json" in names
                or "pytorch_model.bin.index.json" in names)


def _has_tokenizer(p: Path) -> bool:
    vocab = (p / "tokenizer.json").is_file() or (p / "tokenizer.model").is_file() or (
        (p / "vocab.json").is_file() and (p / "merges.txt").is_file())
    return vocab and (p / "tokenizer_config.json").is_file()


def missing_parts(path: str | Path) -> list[str]:
    """What ``path`` lacks to be a usable model directory (empty: nothing)."""
    p = Path(path)
    missing = []
    if (p / ADAPTER_CONFIG).is_file():  # a LoRA adapter: its base model supplies config and weights
        if not (p / ADAPTER_WEIGHTS).is_file():
            missing.append(f"{ADAPTER_WEIGHTS} (the LoRA adapter's weights)")
    elif not (p / "config.json").is_file():
        missing.append("config.json (the model configuration)")
    if not (p / ADAPTER_CONFIG).is_file() and not _has_weights(p):
        missing.append("weights (model.safetensors or pytorch_model.bin)")
    if not _has_tokenizer(p):
        missing.append("tokenizer files (tokenizer.json + tokenizer_config.json)")
    if (p / META_FILE).is_file() and not (p / CHAT_TEMPLATE_FILE).is_file():
        missing.append(f"{CHAT_TEMPLATE_FILE} (the chat template its training prompts were rendered with)")
    return missing


def _is_run_dir(p: Path) -> bool:
    return (p / "config.yaml").is_file() and ((p / "metrics.jsonl").is_file() or (p / "checkpoints").is_dir())


def check_model_dir(path: str | Path, *, what: str = "model directory") -> Path:
    """``path`` as a usable model directory, else a :class:`ConfigError` naming what is missing."""
    p = Path(path).expanduser()
    if not p.is_dir():
        raise ConfigError(f"{what} {p}: no such directory")
    if _is_run_dir(p):
        raise ConfigError(f"{p} is a run directory, not a model: pass one of its checkpoints "
                          f"({p}/checkpoints/step-N) or {p}@last / {p}@best / {p}@N")
    missing = missing_parts(p)
    if missing:
        hint = ""
        if (p / "trainer.json").is_file() and not _has_tokenizer(p):
            hint = (" (a checkpoint written before openforge saved complete checkpoints: "
                    "`forge export model RUN_DIR --step N --out DIR` adds the base model's tokenizer and template)")
        raise ConfigError(f"{p} is not a usable {what}: missing {'; '.join(missing)}{hint}")
    return p


def _step_entry(entries: list[dict[str, Any]], step: int) -> dict[str, Any]:
    for e in entries:
        if e["step"] == step:
            return e
    raise ConfigError(f"no GRPO step {step} in this run (steps: {', '.join(str(e['step']) for e in entries) or 'none'})")


def resolve_checkpoint(run_dir: str | Path, selector: str = "last") -> Path | str:
    """The model of ``RUN@selector``: ``last`` (default), ``best``, a step number, or ``base`` (the
    model the run started from: an alias or path). A path that is itself a model is returned as is."""
    run = Path(run_dir).expanduser()
    if ((run / "config.json").is_file() or (run / ADAPTER_CONFIG).is_file()) and not (run / "checkpoints").is_dir():
        return run  # already a model directory
    ckdir = run / "checkpoints"
    if not (run / "config.yaml").is_file():
        raise ConfigError(f"{run}: not a run directory (no config.yaml) and not a model directory")
    if selector == "base":
        import yaml

        return str((yaml.safe_load((run / "config.yaml").read_text()).get("model") or {}).get("name", "smollm2-135m"))
    index = json.loads((ckdir / INDEX_FILE).read_text()) if (ckdir / INDEX_FILE).is_file() else {}
    entries = index.get("steps", [])
    on_disk = sorted((int(p.name.split("-")[1]), p.name) for p in ckdir.glob("step-*")
                     if p.is_dir() and p.name.split("-", 1)[1].isdigit()) if ckdir.is_dir() else []
    kept = ", ".join(n for _, n in on_disk) or "none"
    if selector in ("last", "latest"):
        name = index.get("latest") or (on_disk[-1][1] if on_disk else None)
        if name == INITIAL:
            return resolve_checkpoint(run, "base")
    elif selector == "best":
        name = index.get("best")
        if not name:
            raise ConfigError(f"{run}: no checkpoint has a score yet (a checkpoint is scored by the rollouts it "
                              f"sampled at the following steps); kept: {kept}")
    elif selector.isdigit():
        name = _step_entry(entries, int(selector)).get("checkpoint") if entries else f"step-{selector}"
        if name == INITIAL:
            return resolve_checkpoint(run, "base")
        if name is None:
            raise ConfigError(f"{run}: the weights after step {selector} were not saved (trainer.checkpoint_every); "
                              f"kept: {kept}")
    else:
        raise ConfigError(f"{run}@{selector}: expected @last, @best, @base or a step number")
    if not name:
        raise ConfigError(f"{run}: no checkpoint saved")
    path = ckdir / name
    if not path.is_dir():
        raise ConfigError(f"{run}: checkpoint {name} was removed by retention (trainer.keep_checkpoints / "
                          f"keep_best); kept: {kept}")
    return path


def resolve_model_name(name: str) -> str:
    """``RUN@last`` / ``RUN@best`` / ``RUN@N`` / ``RUN@base`` → that model; any other name unchanged."""
    if "@" not in name or Path(name).expanduser().exists():
        return name
    run, _, selector = name.rpartition("@")
    if not run or not Path(run).expanduser().is_dir():
        return name
    return str(resolve_checkpoint(run, selector))
