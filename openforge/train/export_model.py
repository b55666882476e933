"""``forge export model``: a run's checkpoint as a Hugging Face model directory with a model card.

Owns: :func:`export_model` (CPU-trainer runs: copy a checkpoint without its resume-only files, a LoRA
checkpoint's adapter merged into its base (:func:`openforge.train.lora.load_merged`); veRL
runs: merge the sharded FSDP/Megatron checkpoint with ``python -m verl.model_merger``, and a LoRA run's
adapter, which that merger leaves beside the base weights, into them: :func:`merge_verl_lora`), completing a
checkpoint that lacks tokenizer / chat template / ``openforge.json`` (written before checkpoints were
complete) from the run's base model, and :func:`verl_merge_command`.

The result loads with plain ``AutoModelForCausalLM`` / ``AutoTokenizer``, carries the exact chat template
that rendered the training prompts, and its ``README.md`` says how to serve it (vLLM
``--enable-auto-tool-choice --tool-call-parser hermes``). It is written under a temporary name next to
``--out`` and renamed, and an existing non-empty ``--out`` is never overwritten.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import ConfigError
from ..util.atomicdir import publish_dir, staging_dir
from ..util.extras import pip_install
from ..util.modeldir import (
    ADAPTER_CONFIG,
    ADAPTER_WEIGHTS,
    CHAT_TEMPLATE_FILE,
    META_FILE,
    TRAINER_ONLY_FILES,
    check_model_dir,
    read_meta,
    resolve_checkpoint,
)
from .checkpoint import build_meta, write_model_files
from .model_card import model_card

__all__ = ["Exported", "export_model", "merge_verl_lora", "verl_merge_command"]


@dataclass
class Exported:
    """What :func:`export_model` wrote."""

    out: Path
    source: Path
    step: int
    completed: list[str] = field(default_factory=list)  # parts added from the base model
    command: list[str] | None = None  # the veRL merge that produced the weights


def _run_config(run: Path) -> Any:
    from ..config import load_config

    if not (run / "config.yaml").is_file():
        raise ConfigError(f"{run}: not a run directory (no config.yaml)")
    return load_config(run / "config.yaml")


def _split(run_dir: Path) -> tuple[Path, Path | None]:
    """``(run directory, checkpoint)`` of an argument that is a run or one of its checkpoints."""
    is_model = (run_dir / "config.json").is_file() or (run_dir / ADAPTER_CONFIG).is_file()
    if is_model and run_dir.parent.name == "checkpoints":
        return run_dir.parent.parent, run_dir
    return run_dir, None


def _fresh_out(out: Path) -> Path:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"--out {out} exists and is not empty: choose a new directory (nothing was written)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = staging_dir(out, ".export-tmp")
    return tmp


def _complete(tmp: Path, cfg: Any, run: Path, step: int, *, tokenizer_from: str | Path) -> list[str]:
    """Add tokenizer / chat template / metadata the directory lacks; the names of what was added."""
    from ..proxy.backends.transformers import load_tokenizer
    from ..proxy.render import Renderer

    has_tok = (tmp / "tokenizer_config.json").is_file()
    if has_tok and (tmp / CHAT_TEMPLATE_FILE).is_file() and (tmp / META_FILE).is_file():
        return []
    tok = load_tokenizer(str(tmp if has_tok else tokenizer_from))
    renderer = Renderer(tok)  # the template and parser the proxy rendered the run's prompts with
    added = [n for n, ok in (("tokenizer", has_tok), ("chat template", (tmp / CHAT_TEMPLATE_FILE).is_file()),
                             (META_FILE, (tmp / META_FILE).is_file())) if not ok]
    write_model_files(tmp, tokenizer=tok, template=renderer.template,
                      meta=build_meta(cfg, run, step, template=renderer.template, parser=renderer.parser.name))
    return added


def _finish(tmp: Path, out: Path, run: Path) -> None:
    meta = read_meta(tmp)
    assert meta is not None
    (tmp / "README.md").write_text(model_card(meta, run=run, out_name=str(out)))
    check_model_dir(tmp, what="exported model")
    publish_dir(tmp, out)  # an empty out (checked by _fresh_out) is replaced


def export_model(run_dir: str | Path, out: str | Path, *, step: int | None = None, best: bool = False,
                 python: str | None = None) -> Exported:
    """Export a checkpoint of ``run_dir`` (default: its last) to ``out``."""
    if step is not None and best:
        raise ConfigError("--step and --best are exclusive")
    run, ck = _split(Path(run_dir).expanduser().resolve())
    out = Path(out).expanduser().resolve()
    cfg = _run_config(run)
    if cfg.trainer.backend == "verl":
        return _export_verl(run, cfg, out, step=step, best=best, python=python)
    if ck is None:
        src = resolve_checkpoint(run, "best" if best else (str(step) if step is not None else "last"))
        if isinstance(src, str):
            raise ConfigError(f"{run}: no step changed the starting model {src!r}; there is no trained model to export")
        ck = src
    trainer = json.loads((ck / "trainer.json").read_text()) if (ck / "trainer.json").is_file() else {}
    meta = read_meta(ck)
    n = meta.step if meta is not None else int(trainer.get("grpo_step", step or 0))
    tmp = _fresh_out(out)
    try:
        adapter = (ck / ADAPTER_CONFIG).is_file()
        if adapter:
            _merge_adapter(ck, tmp)
        for f in ck.iterdir():
            skip = TRAINER_ONLY_FILES + ((ADAPTER_CONFIG, ADAPTER_WEIGHTS) if adapter else ())
            if f.is_file() and f.name not in skip and f.name != "README.md":
                shutil.copy2(f, tmp / f.name)
        added = _complete(tmp, cfg, run, n, tokenizer_from=cfg.model.name)
        _finish(tmp, out, run)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Exported(out=out, source=ck, step=n, completed=added)


def _merge_adapter(ck: Path, tmp: Path) -> None:
    """A LoRA checkpoint's base with its adapter merged in, saved as plain weights + config into ``tmp``."""
    from .lora import load_merged

    model, _ = load_merged(ck)
    model.save_pretrained(tmp)


# ------------------------------------------------------------------------------------ veRL


def _verl_step_dir(run: Path, step: int | None) -> Path:
    root = run / "checkpoints"
    steps = sorted(int(p.name.rsplit("_", 1)[1]) for p in root.glob("global_step_*") if p.name.rsplit("_", 1)[1].isdigit())
    if not steps:
        raise ConfigError(f"{run}: no veRL checkpoint (checkpoints/global_step_N/actor); "
                          "veRL saves every trainer.save_freq steps")
    n = step if step is not None else steps[-1]
    if n not in steps:
        raise ConfigError(f"{run}: no veRL checkpoint of step {n} (saved: {', '.join(map(str, steps))})")
    actor = root / f"global_step_{n}" / "actor"
    if not actor.is_dir():
        raise ConfigError(f"{actor}: missing (a veRL checkpoint keeps the policy under actor/)")
    return actor


def merge_verl_lora(target: Path, cfg: Any) -> bool:
    """veRL's merger writes a LoRA run as the *base* weights plus ``lora_adapter/``: merge that adapter into
    the weights (the exported model is the trained policy) and drop the folder. False: no adapter there."""
    adapter = target / "lora_adapter"
    if not (adapter / ADAPTER_CONFIG).is_file():
        return False
    from ..proxy.backends.hf_loading import load_merged_into

    conf = json.loads((adapter / ADAPTER_CONFIG).read_text())
    if not conf.get("lora_alpha"):  # veRL's merger writes 0 when its lora_train_meta.json is missing
        lora = cfg.trainer.cpu.lora
        if lora is None:
            raise ConfigError(f"{adapter}: the adapter's lora_alpha is unknown (0) and the run's config sets no "
                              "trainer.cpu.lora.alpha; set it in the run's config.yaml and export again")
        conf["lora_alpha"] = lora.alpha
        (adapter / ADAPTER_CONFIG).write_text(json.dumps(conf, indent=2))
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(target, local_files_only=True)
    merged = load_merged_into(base, adapter)
    for f in target.glob("*.safetensors*"):
        f.unlink()  # the base's shards: the merged weights replace them
    merged.save_pretrained(target)
    shutil.rmtree(adapter)
    return True


def verl_merge_command(actor_dir: str | Path, target: str | Path, *, python: str | None = None) -> list[str]:
    """veRL's own merger of a sharded actor checkpoint into a Hugging Face directory."""
    actor = Path(actor_dir)
    backend = "fsdp" if list(actor.glob("model_world_size_*_rank_*.pt")) else "megatron"
    return [python or sys.executable, "-m", "verl.model_merger", "merge", "--backend", backend,
            "--local_dir", str(actor), "--target_dir", str(target)]


def _export_verl(run: Path, cfg: Any, out: Path, *, step: int | None, best: bool, python: str | None) -> Exported:
    if best:
        raise ConfigError("--best: a veRL run records no per-checkpoint score here; pass --step N")
    actor = _verl_step_dir(run, step)
    n = int(actor.parent.name.rsplit("_", 1)[1])
    tmp = _fresh_out(out)
    cmd = verl_merge_command(actor, tmp, python=python)
    try:
        if python is None and importlib.util.find_spec("verl") is None:
            raise ConfigError(f"merging a veRL checkpoint needs veRL installed ({pip_install('verl')}); "
                              f"the merge this command runs: {' '.join(cmd[:-1])} {out}")
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise ConfigError(f"veRL's merger failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-2000:]}")
        merge_verl_lora(tmp, cfg)
        tok_from = actor / "huggingface" if (actor / "huggingface" / "tokenizer_config.json").is_file() else cfg.model.name
        added = _complete(tmp, cfg, run, n, tokenizer_from=tok_from)
        _finish(tmp, out, run)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Exported(out=out, source=actor, step=n, completed=added, command=cmd)
