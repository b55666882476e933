"""Policy back-ends and the ``--backend`` spec parser.

Owns: :func:`parse_backend_spec` (the registry's :func:`openforge.plugins.make_backend`). Specs:
``scripted:FILE``, ``transformers:MODEL`` (``smollm2-135m`` or a local HF directory), ``vllm:URL``,
``openai:URL``, or a plugin's ``KIND:ARG`` (entry-point group ``openforge.backends``); the built-in
factories are in ``factories``. Back-end modules import their heavy dependencies lazily.
"""

from __future__ import annotations

from typing import Any

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


def parse_backend_spec(spec: str, *, tokenizer: Any = None, model: str | None = None,
                       api_key: str | None = None) -> Backend:
    """Build a back-end from ``KIND:ARG`` through the registry (:func:`openforge.plugins.make_backend`).
    ``tokenizer`` (an HF tokenizer or a local path/alias) overrides the default SmolLM2 tokenizer of
    ``scripted``/``vllm``/``openai``."""
    from ...plugins import make_backend

    return make_backend(spec, tokenizer=tokenizer, model=model, api_key=api_key)
