"""Token logprobs of training segments, computed as cheaply as exactness allows.

Owns: :func:`pack_microbatches` (segments → micro-batches within a token budget), :func:`shared_prefix`
(the prompt prefix a micro-batch's segments have in common and may compute once) and
:func:`token_logprobs` (fp32 logprobs of the target tokens, with gradients).

Three savings, each exact up to float rounding (tests compare them with the plain computation):

- **Chunked head.** The full-vocabulary ``log_softmax`` over ``[B, T, 49152]`` is the memory hog of a
  step (0.8 GB per copy for 8 × 512 tokens). The decoder runs once, then ``lm_head → log_softmax →
  gather`` runs in chunks of positions under activation checkpointing, so only ``[B, T]`` logprobs stay
  alive and each chunk's logits are rebuilt during backward.
- **Head only where the loss is.** ``positions`` restricts the head to the tokens a loss weighs (the
  generated ones), not a harness's long prompt.
- **Shared prompt prefix.** Rollouts through one harness start with the same system prompt and tool
  list (~1.5k tokens for pi with SmolLM2's tokenizer), and rollouts of one task with the same
  instruction. ``prefix`` runs those first tokens through the decoder once for the whole micro-batch:
  the micro-batch becomes one packed sequence, the prefix followed by each row's own tokens, with an
  attention mask that lets every row see the prefix and its own earlier tokens only, and each token at
  its position in its row (so the gradient through the prefix is exact, and per-layer activation
  checkpointing applies: there is no key/value cache to refill). The packer counts a micro-batch as
  ``prefix + Σ (length − prefix)`` tokens, so more segments fit the same activation budget. A prefix
  never reaches a trained token (its logprob needs the hidden state before it), and only decoders known
  to take a custom 4D mask and explicit positions like this (plain causal attention with rotary
  positions, no sliding window: :data:`PREFIX_MODELS`) use it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["MIN_SHARED_PREFIX", "PREFIX_MODELS", "pack_microbatches", "shared_prefix", "token_logprobs"]

#: A shorter common prefix is not worth packing (and its T × T mask) for.
MIN_SHARED_PREFIX = 32
#: ``config.model_type`` of decoders whose packed forward (4D mask, explicit positions) equals the plain
#: one (causal attention, rotary positions; no sliding window or hybrid layers).
PREFIX_MODELS = frozenset({"llama", "qwen2", "qwen3"})


def shared_prefix(seqs: Sequence[Sequence[int]], limits: Sequence[int]) -> int:
    """Tokens every one of ``seqs`` starts with, capped by each ``limits[i]`` (the index of its first
    trained token); 0 when that is under :data:`MIN_SHARED_PREFIX` or there is a single sequence."""
    if len(seqs) < 2:
        return 0
    n = min(min(limits), *(len(s) for s in seqs))
    first = seqs[0]
    for s in seqs[1:]:
        i = 0
        while i < n and s[i] == first[i]:
            i += 1
        n = i
    return n if n >= MIN_SHARED_PREFIX else 0


def pack_microbatches(lengths: Sequence[int], max_tokens: int, *, seqs: Sequence[Sequence[int]] | None = None,
                      limits: Sequence[int] | None = None) -> list[list[int]]:
    """Group indices into micro-batches of at most ``max_tokens`` padded tokens.

    Longest first, so padding stays small; a sequence longer than the budget gets its own batch.
    Without ``seqs`` a batch counts ``len(batch) * max(len)``. With ``seqs`` (and ``limits``, see
    :func:`shared_prefix`) sequences that open alike (the same harness prompt) are packed together,
    longest first within each kind, and a batch with a shared prefix is one packed sequence of
    ``p + Σ (len - p)`` tokens (:func:`token_logprobs`).
    """
    if seqs is not None and limits is not None:
        order = sorted(range(len(lengths)), key=lambda i: (list(seqs[i][:MIN_SHARED_PREFIX]), -lengths[i]))
    else:
        order = sorted(range(len(lengths)), key=lambda i: -lengths[i])

    def cost(batch: list[int]) -> int:
        p = shared_prefix([seqs[i] for i in batch], [limits[i] for i in batch]) if seqs and limits else 0
        if p:
            return p + sum(lengths[i] - p for i in batch)
        return len(batch) * max(lengths[i] for i in batch)

    batches: list[list[int]] = []
    cur: list[int] = []
    for i in order:
        if cur and cost([*cur, i]) > max_tokens:
            batches.append(cur)
            cur = []
        cur.append(i)
    if cur:
        batches.append(cur)
    return batches


def token_logprobs(model: Any, input_ids: Any, attention_mask: Any, *, temperature: float = 1.0,
                   chunk: int = 128, positions: Any = None, prefix: int = 0) -> Any:
    """``[B, T-1]`` logprobs of ``input_ids[:, 1:]`` under ``model`` (fp32, chunked, checkpointed).

    ``positions`` (bool ``[B, T-1]``): compute only there, 0 elsewhere. ``prefix``: the first
    ``prefix`` tokens are the same in every row (right padding) and no position before ``prefix - 1``
    is selected; the rows run as one packed sequence that holds the prefix once (ignored for a model
    outside :data:`PREFIX_MODELS`). Works for decoder-only HF models exposing ``get_decoder()`` /
    ``get_output_embeddings()``; other models fall back to one full-logits forward pass.
    """
    import torch
    from torch.utils.checkpoint import checkpoint

    targets = input_ids[:, 1:]
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    softcap = getattr(getattr(model, "config", None), "final_logit_softcapping", None)
    if decoder is None or head is None or softcap:
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1].float()
        return torch.log_softmax(logits / temperature, -1).gather(-1, targets[..., None])[..., 0]
    if prefix > 1 and positions is not None and getattr(model.config, "model_type", None) in PREFIX_MODELS:
        start = prefix - 1
        if positions[:, :start].any():
            raise ValueError(f"token_logprobs: a selected position lies inside the shared prefix ({prefix} tokens)")
        hidden, index = _packed(decoder, input_ids, attention_mask, prefix)
        rows = _chunked_logprobs(head, hidden[:, index[positions]], targets[positions][None], temperature,
                                 chunk, checkpoint)[0]
        return rows.new_zeros(targets.shape).masked_scatter(positions, rows)
    hidden = decoder(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state[:, :-1]
    if positions is not None:  # the selected positions as one row: [1, N, H]
        rows = _chunked_logprobs(head, hidden[positions][None], targets[positions][None], temperature,
                                 chunk, checkpoint)[0]
        return rows.new_zeros(targets.shape).masked_scatter(positions, rows)
    return _chunked_logprobs(head, hidden, targets, temperature, chunk, checkpoint)


def _packed(decoder: Any, input_ids: Any, attention_mask: Any, prefix: int) -> tuple[Any, Any]:
    """The rows of a right-padded micro-batch that share their first ``prefix`` tokens, through the decoder
    as one sequence: the prefix once, then each row's own tokens. Returns the hidden states ``[1, N, H]``
    and ``index`` ``[B, T - 1]``: where row ``b``'s token ``j`` sits in the packed sequence (meaningful
    from ``j = prefix - 1`` on: the prefix's last token is every row's)."""
    import torch

    lengths = [int(n) for n in attention_mask.sum(1)]
    ids = torch.cat([input_ids[0, :prefix], *(input_ids[b, prefix:n] for b, n in enumerate(lengths))])[None]
    pos = torch.cat([torch.arange(prefix), *(torch.arange(prefix, n) for n in lengths)])
    seq = torch.cat([torch.full((prefix,), -1), *(torch.full((n - prefix,), b) for b, n in enumerate(lengths))])
    # a token sees the prefix and the earlier tokens of its own row
    seen = ((seq[None, :] == -1) | (seq[None, :] == seq[:, None])) & (pos[None, :] <= pos[:, None])
    dtype = next(decoder.parameters()).dtype
    mask = torch.zeros(seen.shape, dtype=dtype).masked_fill_(~seen, torch.finfo(dtype).min)[None, None]
    hidden = decoder(input_ids=ids, attention_mask=mask, position_ids=pos[None], use_cache=False).last_hidden_state
    starts = torch.tensor([0, *lengths[:-1]]).sub(prefix).clamp(min=0).cumsum(0) + prefix
    j = torch.arange(input_ids.shape[1] - 1)
    index = torch.where(j[None, :] < prefix, j[None, :], starts[:, None] + j[None, :] - prefix)
    return hidden, index.clamp(max=ids.shape[1] - 1)


def _chunked_logprobs(head: Any, hidden: Any, targets: Any, temperature: float, chunk: int,
                      checkpoint: Callable[..., Any]) -> Any:
    """``head → log_softmax → gather`` over ``chunk`` positions at a time, each under activation
    checkpointing when it needs a gradient (its logits are rebuilt during backward)."""
    import torch

    def piece(h: Any, t: Any) -> Any:
        logits = head(h).float() / temperature
        return (logits.gather(-1, t[..., None])[..., 0] - torch.logsumexp(logits, -1))

    outs = []
    for s in range(0, hidden.shape[1], chunk):
        h, t = hidden[:, s:s + chunk], targets[:, s:s + chunk]
        if torch.is_grad_enabled() and h.requires_grad:
            outs.append(checkpoint(piece, h, t, use_reentrant=False))
        else:
            outs.append(piece(h, t))
    return torch.cat(outs, 1) if outs else hidden.new_zeros(targets.shape, dtype=torch.float32)
