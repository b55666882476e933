"""veRL 0.9.1 integration: the ``OpenForgeAgentLoop`` (:mod:`.agent_loop`), the proxy back-end that
generates through veRL's server manager (:mod:`.backend`), trajectory → ``AgentLoopOutput`` rows
(:mod:`.outputs`) and the dataset / config / ``main_ppo`` launcher (:mod:`.launch`). Only
:mod:`.agent_loop` imports verl at module level; install it with ``pip install 'openforge-rl[verl]'``."""
