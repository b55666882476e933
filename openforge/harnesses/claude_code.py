"""``claude-code``: the real Claude Code CLI (``@anthropic-ai/claude-code``) against the proxy's
Anthropic Messages API — declared by the harness spec ``specs/claude-code.yaml`` (environment,
argv, final answer and pinned version); this module only names the class the registry returns.
"""

from __future__ import annotations

from .spec_harness import builtin_spec_class

__all__ = ["ClaudeCodeHarness"]

ClaudeCodeHarness = builtin_spec_class("claude-code")
