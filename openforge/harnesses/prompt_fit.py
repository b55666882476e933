"""Does a harness's prompt fit the policy's context? Checked before a run starts.

Owns: :data:`MEASURED_PROMPT_TOKENS` (first-call prompt sizes of the CLI harnesses, whose system
prompt and tools are only known by running them, per pinned version), :func:`prompt_tokens` (a
harness's prompt size: rendered with the policy's tokenizer and chat template — the proxy's
:class:`~openforge.proxy.render.Renderer` — for a harness that declares its prompt
(:class:`DeclaresPrompt`, e.g. react), else the measured table), :func:`context_length` (the run's
context: veRL's ``max_model_len``, else the model's ``max_position_embeddings``) and
:func:`check_prompt_fits` (a :class:`~openforge.core.errors.ConfigError` naming the sizes when the
prompt plus ``rollout.max_tokens`` does not fit).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..core.errors import ConfigError

if TYPE_CHECKING:
    from ..config import RunConfig

__all__ = ["MEASURED_PROMPT_TOKENS", "DeclaresPrompt", "PromptSize", "check_prompt_fits", "context_length",
           "prompt_tokens"]

#: (harness, pinned version) → SmolLM2 tokens of the first call of a one-tool-call claw task (system
#: prompt, tools and task), measured through the proxy in December 2026 (notes/measured-2026-12.md).
#: Re-measure when a pin in :mod:`openforge.harnesses.versions` moves.
MEASURED_PROMPT_TOKENS: dict[tuple[str, str], int] = {
    ("pi", "1.6.0"): 1_500,
    ("codex", "0.171.0"): 9_200,
    ("openclaw", "2026.9.6"): 9_600,
    ("claude-code", "2.1.197"): 20_000,
}

#: SmolLM2-135M-Instruct's context (its config's max_position_embeddings) when its cache is absent.
SMOLLM2_CONTEXT = 8_192


@runtime_checkable
class DeclaresPrompt(Protocol):
    """A harness class that knows the system messages and tools of its first call."""

    @classmethod
    def prompt_spec(cls) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]: ...


@dataclass(frozen=True)
class PromptSize:
    tokens: int
    how: str  # "rendered with <model>'s tokenizer" | "measured for pi 1.6.0 with SmolLM2's tokenizer"


def _pinned_version(harness: str) -> str | None:
    from .versions import NPM_PINS

    pin = NPM_PINS.get(harness)
    return pin.version if pin else None


def _load_tokenizer(model: str) -> Any:
    from ..proxy.light_tokenizer import load_light_tokenizer

    return load_light_tokenizer(model)


def prompt_tokens(harness: str, model: str) -> PromptSize | None:
    """The prompt size of ``harness`` for policy ``model``; None when it is not known."""
    from ..plugins import harness_class

    cls = harness_class(harness)
    if isinstance(cls, DeclaresPrompt):
        from ..proxy.render import Renderer

        messages, tools = cls.prompt_spec()
        try:
            tok = _load_tokenizer(model)
        except Exception:  # e.g. a veRL model id not on this machine: nothing to measure with
            return None
        ids = Renderer(tok).render([*messages, {"role": "user", "content": ""}], tools).ids
        return PromptSize(len(ids), f"system prompt + tools rendered with {model}'s tokenizer")
    version = _pinned_version(harness)
    n = MEASURED_PROMPT_TOKENS.get((harness, version or ""))
    if n is None:
        return None
    return PromptSize(n, f"measured for {harness} {version} with SmolLM2's tokenizer")


def _model_context(model: str) -> int | None:
    from ..proxy.backends.hf_loading import _CACHE_NAME, SMOLLM2_ALIASES, cache_dir

    smollm2 = model.lower() in SMOLLM2_ALIASES
    config = (cache_dir() / _CACHE_NAME if smollm2 else Path(model).expanduser()) / "config.json"
    try:
        n = json.loads(config.read_text()).get("max_position_embeddings")
    except (OSError, ValueError):
        n = None
    return int(n) if isinstance(n, int) else (SMOLLM2_CONTEXT if smollm2 else None)


def context_length(cfg: RunConfig) -> int | None:
    """Tokens a rollout's calls may span: veRL's ``max_model_len``, else the model's own context."""
    if cfg.trainer.backend == "verl":
        return cfg.trainer.verl.max_model_len
    return _model_context(cfg.model.name)


def check_prompt_fits(cfg: RunConfig) -> PromptSize | None:
    """Refuse (:class:`ConfigError`) a harness whose first prompt plus ``rollout.max_tokens`` does not
    fit the context (every harness of a mix is checked); returns the largest size it compared (None:
    no size or context known, nothing checked)."""
    ctx = context_length(cfg)
    sizes = [(name, prompt_tokens(name, cfg.model.name)) for name in cfg.harness.names()]
    problems = []
    for name, size in sizes:
        if size is None or ctx is None:
            continue
        need = size.tokens + cfg.rollout.max_tokens
        if need > ctx:
            fits = ", ".join(f"{h} ~{n / 1000:.1f}k" for (h, _), n in MEASURED_PROMPT_TOKENS.items() if n < ctx)
            problems.append(
                f"harness.name: {name}'s prompt is ~{size.tokens} tokens ({size.how}); with "
                f"rollout.max_tokens={cfg.rollout.max_tokens} its first call needs {need} tokens, more than the "
                f"{ctx}-token context of {cfg.model.name}. Use a model with a longer context, or a harness whose "
                f"prompt fits (react ~0.5k; measured CLI harnesses that fit: {fits or 'none'})")
    if problems:
        raise ConfigError(problems)
    known = [s for _, s in sizes if s is not None]
    return max(known, key=lambda s: s.tokens) if known else None
