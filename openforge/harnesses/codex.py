"""``codex``: the real OpenAI Codex CLI (``@openai/codex``) against the proxy's Responses API —
declared by the harness spec ``specs/codex.yaml`` (its ``config.toml`` with a custom ``openforge``
provider, ``wire_api = "responses"``, analytics, feedback and update checks off; the headless argv
``codex exec --json --dangerously-bypass-approvals-and-sandbox --disable plugins …``; the final
answer from the ``agent_message`` events; the pinned version); this module only names the class.
"""

from __future__ import annotations

from .spec_harness import builtin_spec_class

__all__ = ["CodexHarness"]

CodexHarness = builtin_spec_class("codex")
