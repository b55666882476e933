"""The openforge proxy: impersonates the model API a harness speaks (OpenAI Chat Completions, OpenAI
Responses, Anthropic Messages, Gemini generateContent — streaming and not), serves each call from the policy back-end
token-in/token-out, and records every call token-exactly.

API summary (names other modules rely on)::

    from openforge.proxy import ProxyServer, parse_backend_spec, SamplingParams

    backend = parse_backend_spec("scripted:script.yaml")     # | transformers:smollm2-135m | vllm:URL | openai:URL
    async with ProxyServer(backend, store=store, uds=None) as proxy:   # uvicorn inside this event loop
        h = proxy.create_rollout(task_id, harness="codex")   # RolloutHandle(rollout_id, api_key,
                                                              #   openai_base_url, anthropic_base_url,
                                                              #   gemini_base_url)
        ...                                                   # harness calls {h.openai_base_url}/chat/completions ...
        proxy.get_trajectory(h.rollout_id)                    # calls so far
        traj = proxy.finish_rollout(h.rollout_id, reward=1.0) # segments built + validated (409 if calls in flight)
        traj = await proxy.afinish_rollout(h.rollout_id, reward=1.0)  # waits for calls in flight, includes them
        proxy.open_rollouts()                                 # unfinished, incl. those a dead proxy left in the store
        await proxy.pause(); ...; await proxy.resume()        # weight sync: new calls wait, in-flight finish

- :class:`Backend` (``backends.base``): ``tokenizer``, ``max_context``, ``async aclose()``; subclass one of
  its two kinds: :class:`TokenBackend` (``async generate(prompt_ids, params, ctx=None) ->
  Generation(output_ids, logprobs, finish_reason)``, recorded exact) or :class:`MessageBackend`
  (``async complete(request, params, ctx=None) -> TextCompletion``, a pass-through, recorded inexact).
- ``backends.hf_loading``: :func:`load_smollm2` ``(dtype=float32) -> (model, tokenizer)`` (one-time
  safetensors cache under ``$OPENFORGE_CACHE`` or ``~/.cache/openforge/models``), ``load_tokenizer``,
  ``load_model``; ``backends.transformers``: ``TransformersBackend(model, tokenizer)`` (``.model`` is the
  live torch module; ``swap_weights``).
- ``backends.scripted.ScriptedBackend`` — YAML turns replayed per rollout (test double users want).
- ``render.Renderer`` — chat template → ids, parser, history splicing.
- ``stream`` — incremental SSE: a streaming request's ``GenContext.emit(ids)`` (thread-safe) feeds a
  ``TokenSink``; ``DeltaDecoder`` turns ids into safe text/reasoning deltas (no ``<tool_call>`` leaks).
- HTTP: ``app.build_app`` and the route table (routes under ``/r/{rollout_id}`` + ``/admin``), handlers in
  ``routes_model`` (model API routes), ``routes_admin`` (control plane) and ``live`` (live SSE), sharing
  ``routing.AppState`` and the error shapes; ``wire`` is the adapter seam (``wire_chat``, ``wire_responses``,
  ``wire_messages``); CLI: ``forge proxy serve``.
- ``intake`` — bounded request intake (size, JSON depth, strict UTF-8, output-bounded decompression,
  defensive header parsing); ``conn_guard`` — the uvicorn protocol with header/body deadlines.

Heavy dependencies (torch, transformers) load only when a back-end needs them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = [
    "Backend",
    "GenContext",
    "Generation",
    "MessageBackend",
    "ProxyLimits",
    "ProxyServer",
    "ProxyTimeouts",
    "Renderer",
    "RolloutHandle",
    "SamplingParams",
    "ScriptedBackend",
    "TokenBackend",
    "TransformersBackend",
    "load_smollm2",
    "load_tokenizer",
    "parse_backend_spec",
]

_WHERE = {
    "Backend": "backends.base", "GenContext": "backends.base", "Generation": "backends.base",
    "SamplingParams": "backends.base", "TokenBackend": "backends.base", "MessageBackend": "backends.base",
    "ProxyServer": "server", "ProxyLimits": "bounds", "ProxyTimeouts": "bounds", "Renderer": "render",
    "RolloutHandle": "recorder", "ScriptedBackend": "backends.scripted",
    "TransformersBackend": "backends.transformers", "load_smollm2": "backends.hf_loading",
    "load_tokenizer": "backends.hf_loading", "parse_backend_spec": "backends",
}

if TYPE_CHECKING:
    from .backends import parse_backend_spec
    from .backends.base import Backend, GenContext, Generation, MessageBackend, SamplingParams, TokenBackend
    from .backends.hf_loading import load_smollm2, load_tokenizer
    from .backends.scripted import ScriptedBackend
    from .backends.transformers import TransformersBackend
    from .bounds import ProxyLimits, ProxyTimeouts
    from .recorder import RolloutHandle
    from .render import Renderer
    from .server import ProxyServer


def __getattr__(name: str) -> Any:
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{mod}"), name)
