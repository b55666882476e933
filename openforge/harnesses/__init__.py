"""Built-in harness adapters, one module each: ``react`` (openforge's own minimal agent), ``codex``,
``claude_code``, ``openclaw``, ``zeroclaw``, ``pi``, ``opencode``, ``gemini_cli``, ``qwen_code``, ``crush``,
``browser_use``, ``computer_use``; plus ``cli`` (the :class:`~openforge.harnesses.cli.CliHarness` base),
``versions`` (the pins) and ``installer``; ``spec`` / ``spec_harness`` (CLI harnesses declared in
YAML/TOML), ``conformance`` (``forge harness check``), ``notes`` (what a harness version sends, and drift
against it) and ``matrix`` (the generated harness matrix of ``docs/harnesses.md``).

Look harnesses up by name with :func:`openforge.plugins.harness_class` / :func:`~openforge.plugins.make_harness`; nothing is imported here so
that ``import openforge`` stays light.
"""
