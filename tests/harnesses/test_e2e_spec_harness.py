"""A harness defined only by its spec file, end to end on each of its wires: minichat
(data/minichat/minichat.yaml, a real CLI: streamed Chat Completions through the `openai` SDK, or
streamed Gemini ``streamGenerateContent`` through the `google-genai` SDK) against the real proxy with
a scripted policy that makes one shell tool call and then answers, in a loopback-only sandbox. The
same contract as test_e2e_cli.py: the exact calls on the chosen wire, the final answer, one segment."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from e2e import shell_call_then_answer
from testdeps import missing

from openforge.plugins import make_harness

SPEC = Path(__file__).resolve().parent / "data" / "minichat" / "minichat.yaml"


@pytest.mark.parametrize("wire", ["chat", "gemini"])
async def test_spec_harness_shell_call_then_answer(tmp_path, tokenizer, wire):
    if wire == "gemini" and importlib.util.find_spec("google.genai") is None:
        missing("google-genai is not installed (the dev extra): minichat drives the gemini wire with it")
    h = make_harness(str(SPEC), wire_api=wire)
    run = await shell_call_then_answer(h, "minichat", "bash", "command", wire, tmp_path=tmp_path, tokenizer=tokenizer)
    assert len(run.traj.segments) == 1, [len(s.call_indices) for s in run.traj.segments]
