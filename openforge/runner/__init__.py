"""The run layer: what drives harnesses, environments, sandboxes and the trainer through a run.

Holds: :mod:`~openforge.runner.forge` (:class:`Forge` and ``openforge.run``: a GRPO run end to end) with
:mod:`~openforge.runner.run_report` (its metrics lines and summary table),
:mod:`~openforge.runner.session` (one run's proxy, store, launcher and rollouts),
:mod:`~openforge.runner.parts` (building the run's parts from config), :mod:`~openforge.runner.rollout` (one
rollout in a sandbox) with :mod:`~openforge.runner.rollout_steps` (its steps, :class:`RolloutRequest`),
:mod:`~openforge.runner.seams` (the Protocols a rollout needs of a proxy and a store),
:mod:`~openforge.runner.harness_mix`, :mod:`~openforge.runner.task_selection`,
:mod:`~openforge.runner.task_cursor` (which tasks next), :mod:`~openforge.runner.step_sampling`,
:mod:`~openforge.runner.run_health` (when a run must stop), :mod:`~openforge.runner.project_paths` (what
no sandbox may show), :mod:`~openforge.runner.worker_runtime` (rollouts inside a veRL worker),
:mod:`~openforge.runner.teacher` (SFT warm-starts), :mod:`~openforge.runner.evaluation`,
:mod:`~openforge.runner.heldout_eval` (the held-out points), :mod:`~openforge.runner.content_hash` (what goes
into their cache keys) and :mod:`~openforge.runner.preflight`.

The package is not named ``run``: ``openforge.run`` is the public function that starts a run. This
``__init__`` imports nothing.
"""
