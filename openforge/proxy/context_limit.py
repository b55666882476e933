"""The policy's context window: a sound lower bound on a text's token count from its byte length, and
the one error every context overflow becomes.

Owns: :func:`max_token_bytes` (the most UTF-8 bytes of text any single token can stand for, or None
when the tokenizer's pipeline gives no such guarantee), :class:`PromptTooLong` (raised by the renderer
when the byte bound alone proves a prompt cannot fit) and :func:`context_overflow` (the overflow as a
:class:`~openforge.core.errors.ProxyError` in the called API's terms: OpenAI ``400 context_length_exceeded``,
Anthropic ``400 invalid_request_error`` "prompt is too long: N tokens > M maximum", Gemini ``400
INVALID_ARGUMENT`` "The input token count (N) exceeds the maximum number of tokens allowed (M).").

**The bound.** If every token of a tokenizer's vocabulary (added and special tokens included) stands for
at most ``M`` bytes of the text it was encoded from, a text of ``B`` bytes needs at least ``ceil(B / M)``
tokens. That holds only when encoding neither drops nor shrinks text before the model sees it, so it
is derived from the Rust tokenizer's own pipeline and refused (``None``: tokenize as before) unless the
normalizer only inserts or widens text, the pre-tokenizer keeps every byte, the model is BPE that
never fuses unknown characters into one token (a byte-level or byte-fallback vocabulary has no unknown
characters), and no added token swallows the whitespace around it.
"""

from __future__ import annotations

import json
from typing import Any

from ..core.errors import ContextOverflow
from ..core.types import ServedAPI

__all__ = ["PromptTooLong", "budget_spent", "context_overflow", "max_token_bytes", "min_tokens"]

_KEEP_PRE = {"ByteLevel", "Metaspace", "Digits", "Punctuation", "UnicodeScripts"}


class PromptTooLong(ValueError):
    """The rendered prompt has at least ``min_tokens`` tokens (proved from its bytes, not tokenized)."""

    def __init__(self, min_tokens: int, n_bytes: int):
        super().__init__(min_tokens, n_bytes)
        self.min_tokens, self.n_bytes = min_tokens, n_bytes


def min_tokens(n_bytes: int, max_bytes: int) -> int:
    """The fewest tokens a text of ``n_bytes`` UTF-8 bytes can encode to."""
    return -(-n_bytes // max_bytes)


def context_overflow(api: ServedAPI, limit: int, n_tokens: int, *, n_bytes: int | None = None) -> ContextOverflow:
    """The error for a prompt of ``n_tokens`` (``n_bytes`` given: at least that many, counted from its
    bytes without tokenizing) that does not fit a context of ``limit`` tokens, in ``api``'s terms."""
    how = f" (at least: counted from its {n_bytes} bytes without tokenizing)" if n_bytes is not None else ""
    if api == "messages":  # Anthropic's wording; Claude Code parses "N tokens > M maximum" to compact
        return ContextOverflow(f"prompt is too long: {n_tokens} tokens > {limit} maximum{how}",
                               n_tokens=n_tokens, limit=limit, kind="invalid_request_error")
    if api == "gemini":  # the Gemini API's wording
        return ContextOverflow(f"The input token count ({n_tokens}) exceeds the maximum number of tokens allowed "
                               f"({limit}){how}.", n_tokens=n_tokens, limit=limit, param="contents")
    return ContextOverflow(f"This model's maximum context length is {limit} tokens. However, your messages resulted "
                           f"in {n_tokens} tokens{how}. Please reduce the length of the messages.",
                           n_tokens=n_tokens, limit=limit, param="input" if api == "responses" else "messages",
                           code="context_length_exceeded")


def budget_spent(api: ServedAPI, budget: int, used: int) -> ContextOverflow:
    """The error for a call of a rollout that has generated ``used`` tokens of its ``budget``
    (``SamplingParams.rollout_max_tokens``): the rollout's output budget is a context of its own, and
    a harness meets it as it meets a full context."""
    what = (f"this rollout has generated {used} tokens and its budget is {budget} tokens "
            "(the proxy's rollout_max_tokens): no more calls")
    if api == "messages":
        return ContextOverflow(f"prompt is too long: {what}", n_tokens=used, limit=budget, kind="invalid_request_error")
    if api == "gemini":
        return ContextOverflow(f"The input token count exceeds the maximum number of tokens allowed: {what}",
                               n_tokens=used, limit=budget, param="contents")
    return ContextOverflow(f"This model's token budget is spent: {what}", n_tokens=used, limit=budget,
                           param="input" if api == "responses" else "messages", code="context_length_exceeded")


def max_token_bytes(tokenizer: Any) -> int | None:
    """The most bytes of input text one token of ``tokenizer`` can cover, or None when its encoding
    pipeline does not guarantee ``tokens >= bytes / M`` (see the module docstring)."""
    fast = getattr(tokenizer, "_tokenizer", None)
    if fast is None or not type(fast).__module__.startswith("tokenizers"):
        return None
    try:
        norm, pre = (json.loads(c.__getstate__()) if c is not None else None
                     for c in (fast.normalizer, fast.pre_tokenizer))
        model = fast.model
        added = list(fast.get_added_tokens_decoder().values())
    except (AttributeError, TypeError, ValueError):
        return None
    byte_level = _byte_level(pre)
    if not (_widening(norm) and _keeps_bytes(pre) and _no_fused_unknowns(model, byte_level)):
        return None
    if any(a.lstrip or a.rstrip for a in added):
        return None  # such a token also covers the whitespace next to it, however long
    contents = {a.content for a in added}
    # A byte-level token's characters are one byte each; otherwise a piece's UTF-8 length is at least the
    # bytes it stands for (SentencePiece's "▁" and "<0xNN>" byte tokens overstate: still sound).
    most = max((len(t) if byte_level else len(t.encode("utf-8"))
                for t in fast.get_vocab(with_added_tokens=False) if t not in contents), default=0)
    return max([most, 4] + [len(c.encode("utf-8")) for c in contents])


def _parts(node: dict[str, Any], key: str) -> list[dict[str, Any]]:
    return list(node.get(key) or []) if node.get("type") == "Sequence" else [node]


def _widening(norm: dict[str, Any] | None) -> bool:
    """The normalizer never makes the text shorter (so its bytes bound the input's)."""
    if norm is None:
        return True
    for n in _parts(norm, "normalizers"):
        t = n.get("type")
        if t == "Prepend":
            continue
        if t == "Replace":
            pat = (n.get("pattern") or {}).get("String")
            if isinstance(pat, str) and pat and len(str(n.get("content", "")).encode()) >= len(pat.encode()):
                continue
        if t == "Sequence" and _widening(n):
            continue
        return False
    return True


def _keeps_bytes(pre: dict[str, Any] | None) -> bool:
    if pre is None:
        return True
    for p in _parts(pre, "pretokenizers"):
        t = p.get("type")
        if (t in _KEEP_PRE or t == "Split") and p.get("behavior") != "Removed":
            continue
        if t == "Sequence" and _keeps_bytes(p):
            continue
        return False
    return True


def _byte_level(pre: dict[str, Any] | None) -> bool:
    return pre is not None and any(p.get("type") == "ByteLevel" for p in _parts(pre, "pretokenizers"))


def _no_fused_unknowns(model: Any, byte_level: bool) -> bool:
    return type(model).__name__ == "BPE" and (byte_level or bool(getattr(model, "byte_fallback", False))
                                              or not getattr(model, "fuse_unk", True))
