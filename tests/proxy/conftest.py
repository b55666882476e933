"""Shared fixtures: SmolLM2's tokenizer and a renderer over it once per session, a scripted proxy factory."""

from __future__ import annotations

import pytest
from testdeps import smollm2_model, smollm2_tokenizer
from testservers import serve_app

__all__ = ["TOOLS", "assert_early", "serve_app"]


@pytest.fixture(scope="session")
def tokenizer():
    return smollm2_tokenizer()


@pytest.fixture(scope="session")
def renderer(tokenizer):
    """One ``Renderer`` over SmolLM2's tokenizer (building one takes ~0.4 s: property tests share it)."""
    from openforge.proxy.render import Renderer

    return Renderer(tokenizer)


@pytest.fixture(scope="session")
def smollm2():
    """SmolLM2-135M-Instruct ``(model, tokenizer)``, loaded once per session (slow tests only)."""
    return smollm2_model()


def assert_early(arrivals: list[float], t0: float, t_end: float, *, min_total: float, first: float, spread: float,
                 min_count: int = 5) -> None:
    """Deltas really streamed: at least ``min_count`` arrived, the whole took ``min_total`` s or more (the
    generation's floor), the first came ``first`` × ``min_total`` s or more before the end, and they spread
    over ``spread`` × ``min_total`` s or more. A buffered answer arrives all at once, at the end.

    Measured against the generation's floor, not the wall time from ``t0``: on a loaded machine the set-up
    before the first event (a new connection, the first request of a proxy) can take longer than the
    generation itself, and says nothing about buffering."""
    assert len(arrivals) >= min_count, arrivals
    total = t_end - t0
    assert total >= min_total, total
    assert t_end - arrivals[0] > first * min_total, (t_end - arrivals[0], first * min_total)
    assert arrivals[-1] - arrivals[0] > spread * min_total, (arrivals[-1] - arrivals[0], spread * min_total)


TOOLS = [{"type": "function", "function": {"name": "bash", "description": "Run a shell command.",
                                           "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                                                          "required": ["command"]}}}]


