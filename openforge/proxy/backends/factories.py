"""The built-in back-ends' spec factories: ``KIND:ARG`` → a :class:`Backend`.

Owns: :func:`scripted`, :func:`transformers`, :func:`vllm` and :func:`openai`, registered under
those kinds in :data:`openforge.plugins.BACKENDS`; a plugin's back-end (entry-point group
``openforge.backends``) has the same signature: ``factory(ARG, *, tokenizer=None, model=None,
api_key=None)``. Each imports its back-end module (and its heavy dependencies) only when called.
"""

from __future__ import annotations

from typing import Any

from .base import Backend

__all__ = ["openai", "scripted", "transformers", "vllm"]


def _tokenizer(tokenizer: Any) -> Any:
    """An HF tokenizer, ``None`` (the back-end's default), or one loaded from a local path / alias."""
    if isinstance(tokenizer, str):
        from .hf_loading import load_tokenizer

        return load_tokenizer(tokenizer)
    return tokenizer


def scripted(arg: str, *, tokenizer: Any = None, **_: Any) -> Backend:
    """``scripted:FILE``: YAML turns replayed per rollout (``-`` for the reference solution)."""
    from .scripted import ScriptedBackend

    return ScriptedBackend(arg, tokenizer=_tokenizer(tokenizer))


def transformers(arg: str, **_: Any) -> Backend:
    """``transformers:MODEL``: ``smollm2-135m`` or a local HF directory, served in-process."""
    from .transformers import TransformersBackend

    return TransformersBackend.from_spec(arg)


def vllm(arg: str, *, tokenizer: Any = None, model: str | None = None, api_key: str | None = None) -> Backend:
    """``vllm:URL``: a vLLM server, token-in/token-out."""
    from .vllm import VLLMBackend

    return VLLMBackend(arg, tokenizer=_tokenizer(tokenizer), model=model, api_key=api_key)


def openai(arg: str, *, tokenizer: Any = None, model: str | None = None, api_key: str | None = None) -> Backend:
    """``openai:URL``: any OpenAI-compatible server (text in, text out: an inexact teacher)."""
    from .openai import OpenAIBackend

    return OpenAIBackend(arg, tokenizer=_tokenizer(tokenizer), model=model, api_key=api_key)
