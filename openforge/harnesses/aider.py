"""``aider``: the real aider CLI (PyPI ``aider-chat``) against the proxy's Chat Completions API
(through LiteLLM's ``openai/`` provider), one ``--message`` run headless.

Declarative data (a spec later): package ``PYPI_PINS["aider"]``, executable ``aider`` in its own
venv; wire ``chat``; argv ``aider --message TASK --model openai/<model> --openai-api-base URL
--edit-format diff --no-git --no-pretty --no-fancy-input --no-stream --analytics-disable
--no-check-update …``; files below the private HOME: ``.aider.model.metadata.json`` (the model's
context window, zero cost) and an empty fresh ``.aider/caches/model_prices_and_context_window.json``
(aider would otherwise download LiteLLM's price list); env ``OPENAI_API_KEY``,
``LITELLM_LOCAL_MODEL_COST_MAP`` and ``LITELLM_TELEMETRY=False`` (``pypi_cli.litellm_env``).

Aider is not a tool-calling loop: the model edits files with SEARCH/REPLACE blocks and proposes
shell commands in ```` ```bash ```` blocks. ``--yes-always`` deliberately declines shell commands,
so it is not passed: stdin is closed, and at end of input aider takes each prompt's default, which
is Yes (run the command, add its output to the chat, create the file, allow the edit). Aider calls the model
again only to reflect an error back (an edit that does not apply, a file the reply mentions); the
final answer is its last reply, read back from the ``--llm-history-file`` it writes under HOME.
"""

from __future__ import annotations

import json
from typing import Any

from ..harness import RolloutContext
from .pypi_cli import PypiCliHarness, litellm_env, pypi_install_hint

__all__ = ["AiderHarness", "aider_model_metadata", "last_llm_response"]

METADATA_FILE = ".aider.model.metadata.json"
LLM_HISTORY = ".aider.llm.history"
PRICE_CACHE = ".aider/caches/model_prices_and_context_window.json"


def aider_model_metadata(model: str, *, context_window: int = 128_000, max_tokens: int = 4096) -> str:
    """LiteLLM model metadata for ``openai/<model>`` (aider warns about, and mis-sizes, unknown models)."""
    return json.dumps({f"openai/{model}": {
        "max_input_tokens": context_window, "max_tokens": max_tokens, "max_output_tokens": max_tokens,
        "input_cost_per_token": 0.0, "output_cost_per_token": 0.0, "litellm_provider": "openai",
        "mode": "chat"}}, indent=2)


class AiderHarness(PypiCliHarness):
    name = "aider"
    wire_api = "chat"
    executable = "aider"
    install_hint = pypi_install_hint("aider")
    answer_file = LLM_HISTORY

    def __init__(self, *, edit_format: str = "diff", **kw: Any):
        super().__init__(**kw)
        self.edit_format = edit_format

    def config_files(self, ctx: RolloutContext) -> dict[str, str]:
        return {METADATA_FILE: aider_model_metadata(ctx.model), PRICE_CACHE: "{}"}

    def environment(self, ctx: RolloutContext) -> dict[str, str]:
        return {**litellm_env(ctx), "OPENAI_API_BASE": ctx.openai_base_url}

    def command(self, ctx: RolloutContext, exe: str) -> list[str]:
        home = ctx.home
        return [exe, "--model", f"openai/{ctx.model}", "--openai-api-base", ctx.openai_base_url,
                "--model-metadata-file", str(home / METADATA_FILE), "--edit-format", self.edit_format,
                "--no-git", "--no-gitignore", "--no-auto-commits", "--no-pretty", "--no-fancy-input",
                "--no-stream", "--analytics-disable", "--no-check-update", "--no-show-release-notes",
                "--no-show-model-warnings", "--no-detect-urls", "--map-tokens", "0",
                "--env-file", str(home / ".aider.env"),
                "--input-history-file", str(home / ".aider.input.history"),
                "--chat-history-file", str(home / ".aider.chat.history.md"),
                "--llm-history-file", str(home / LLM_HISTORY),
                *self.extra_args, "--message", ctx.instruction]

    def answer_from_file(self, raw: bytes, stdout_answer: str | None) -> str | None:
        """The last reply in the LLM history (stdout is aider's chat transcript, no answer)."""
        return last_llm_response(raw.decode(errors="replace"))


def last_llm_response(history: str) -> str | None:
    """The text of the last ``LLM RESPONSE`` in aider's LLM history log (each of its lines is
    written as ``ASSISTANT <line>``); None when the model never answered."""
    _, sep, tail = history.rpartition("\nLLM RESPONSE ")
    if not sep:
        if not history.startswith("LLM RESPONSE "):
            return None
        tail = history[len("LLM RESPONSE "):]
    lines = tail.split("\n")[1:]  # past the timestamp
    text = []
    for line in lines:
        if line == "ASSISTANT" or line.startswith("ASSISTANT "):
            text.append(line[len("ASSISTANT "):])
        elif line.startswith("TO LLM "):
            break
    return "\n".join(text).strip() or None
