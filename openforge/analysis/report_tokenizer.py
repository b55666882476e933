"""Which tokenizer decodes a run's token ids in ``forge report`` when ``--tokenizer`` is not given.

Owns: :class:`TokenizerChoice` and :func:`run_tokenizer`, a pure reading of a run directory's
``config.yaml``: a training run's ``model.name``; a ``forge eval`` directory's ``--tokenizer``, else its
``transformers:MODEL`` back-end, else the default (SmolLM2's) tokenizer that its scripted / vLLM /
OpenAI back-end rendered the calls with. Loading it is the caller's (the CLI shows progress).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_TOKENIZER", "TokenizerChoice", "run_tokenizer"]

#: The tokenizer a scripted / vllm / openai back-end uses unless given one (``--tokenizer``).
DEFAULT_TOKENIZER = "smollm2-135m"


@dataclass(frozen=True)
class TokenizerChoice:
    """``name`` (``None``: no tokenizer known) and where it comes from, in the user's terms."""

    name: str | None
    source: str


def _eval_tokenizer(config: Mapping[str, Any]) -> TokenizerChoice:
    if config.get("tokenizer"):
        return TokenizerChoice(str(config["tokenizer"]), "the eval's --tokenizer")
    backend = str(config.get("backend") or "")
    kind, _, arg = backend.partition(":")
    if kind == "transformers" and arg:
        return TokenizerChoice(arg, f"the eval's back-end {backend}")
    if kind in ("scripted", "vllm", "openai") or backend == "reference":
        return TokenizerChoice(DEFAULT_TOKENIZER, f"the default tokenizer of the eval's {kind} back-end")
    return TokenizerChoice(None, f"the eval's back-end {backend or '(none recorded)'} names no tokenizer")


def run_tokenizer(config: Mapping[str, Any] | None) -> TokenizerChoice:
    """The tokenizer a run directory's token ids were made with, read from its ``config.yaml``."""
    if not config:
        return TokenizerChoice(None, "the run directory has no config.yaml naming its model")
    if config.get("kind") == "eval":
        return _eval_tokenizer(config)
    model = config.get("model")
    name = model.get("name") if isinstance(model, Mapping) else None
    if name:
        return TokenizerChoice(str(name), "the run's model.name")
    return TokenizerChoice(None, "the run's config.yaml names no model (model.name)")
