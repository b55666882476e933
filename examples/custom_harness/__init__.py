"""A custom harness whose agent is a separate script: ``harness.py`` (the :class:`MyAgent` class)
starts ``agent.py`` (the agent) in the rollout's sandbox. ``agent.py`` is visible there because it is
a Python file next to the harness's module (``Harness.agent_files``'s default)."""
