"""Shared fixtures: SmolLM2's tokenizer once per session, a scripted proxy factory."""

from __future__ import annotations

import pytest
from testdeps import smollm2_model, smollm2_tokenizer
from testservers import serve_app

__all__ = ["TOOLS", "assert_early", "serve_app"]


@pytest.fixture(scope="session")
def tokenizer():
    return smollm2_tokenizer()


@pytest.fixture(scope="session")
def smollm2():
    """SmolLM2-135M-Instruct ``(model, tokenizer)``, loaded once per session (slow tests only)."""
    return smollm2_model()


def assert_early(arrivals: list[float], t0: float, t_end: float, *, min_total: float, first: float, spread: float,
                 min_count: int = 5) -> None:
    """Deltas really streamed: at least ``min_count`` arrived, the whole took ``min_total`` s or more,
    the first came within the first ``first`` fraction of it, and they spread over ``spread`` of it."""
    assert len(arrivals) >= min_count, arrivals
    total = t_end - t0
    assert total >= min_total, total
    assert arrivals[0] - t0 < first * total, (arrivals[0] - t0, total)
    assert arrivals[-1] - arrivals[0] > spread * total


TOOLS = [{"type": "function", "function": {"name": "bash", "description": "Run a shell command.",
                                           "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                                                          "required": ["command"]}}}]


