"""Fixtures for the training tests: a tiny randomly initialised llama (real transformers code) and,
for slow tests, SmolLM2-135M loaded once per session; SmolLM2's tokenizer."""

from __future__ import annotations

import pytest
from testdeps import smollm2_model, smollm2_tokenizer


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
    return smollm2_model()


@pytest.fixture(scope="session")
def tokenizer():
    """SmolLM2's tokenizer (the proxy renders with it)."""
    return smollm2_tokenizer()
