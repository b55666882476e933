"""Policy back-ends and the ``--backend`` spec parser.

Owns: :func:`parse_backend_spec`. Specs: ``scripted:FILE``, ``transformers:MODEL`` (``smollm2-135m`` or
a local HF directory), ``vllm:URL``, ``openai:URL``. Back-end modules import their heavy
dependencies lazily.
"""

from __future__ import annotations

from typing import Any

from ...errors import ConfigError
from .base import (
    Backend,
    GenContext,
    Generation,
    MessageBackend,
    SamplingParams,
    TextCompletion,
    TokenBackend,
)

__all__ = [
    "Backend",
    "GenContext",
    "Generation",
    "MessageBackend",
    "SamplingParams",
    "TextCompletion",
    "TokenBackend",
    "parse_backend_spec",
]

KINDS = ("scripted", "transformers", "vllm", "openai")


def parse_backend_spec(spec: str, *, tokenizer: Any = None, model: str | None = None,
                       api_key: str | None = None) -> Backend:
    """Build a back-end from ``KIND:ARG``. ``tokenizer`` (an HF tokenizer or a local path/alias)
    overrides the default SmolLM2 tokenizer of ``scripted``/``vllm``/``openai``."""
    if not isinstance(spec, str) or ":" not in spec:
        raise ConfigError(f"backend spec {spec!r}: expected KIND:ARG with KIND one of {', '.join(KINDS)}")
    kind, arg = spec.split(":", 1)
    if not arg:
        raise ConfigError(f"backend spec {spec!r}: missing the part after '{kind}:'")
    if isinstance(tokenizer, str):
        from .hf_loading import load_tokenizer

        tokenizer = load_tokenizer(tokenizer)
    if kind == "scripted":
        from .scripted import ScriptedBackend

        return ScriptedBackend(arg, tokenizer=tokenizer)
    if kind == "transformers":
        from .transformers import TransformersBackend

        return TransformersBackend.from_spec(arg)
    if kind == "vllm":
        from .vllm import VLLMBackend

        return VLLMBackend(arg, tokenizer=tokenizer, model=model, api_key=api_key)
    if kind == "openai":
        from .openai import OpenAIBackend

        return OpenAIBackend(arg, tokenizer=tokenizer, model=model, api_key=api_key)
    raise ConfigError(f"backend spec {spec!r}: unknown kind {kind!r} (one of {', '.join(KINDS)})")
