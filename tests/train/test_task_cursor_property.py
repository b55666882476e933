"""Property: within one GRPO step (its first draw and every resample round), the task cursor hands out no
task twice while the run has tasks the step has not rolled out yet, whatever the task count,
``tasks_per_step``, the rounds, where the epoch stands, and resumes from a saved state between steps;
and every task still comes up once per epoch."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from openforge.core.task import Task
from openforge.runner.rollout import GroupResults
from openforge.runner.step_sampling import SamplingPlan, sample_step
from openforge.runner.task_cursor import CursorState, TaskCursor

STEPS = st.lists(st.tuples(st.integers(0, 3), st.booleans()), min_size=1, max_size=8)  # (resample rounds, resume)


def _assert_no_early_repeat(step: list[str], n_tasks: int) -> None:
    seen: set[str] = set()
    for i, tid in enumerate(step):
        assert tid not in seen or len(seen) == n_tasks, f"{tid} again at draw {i} of {step} while unused tasks remain"
        seen.add(tid)


@settings(max_examples=400, deadline=None)
@given(n_tasks=st.integers(1, 12), per_step=st.integers(1, 12), seed=st.integers(0, 2**16), steps=STEPS)
def test_a_step_repeats_no_task_while_unused_ones_remain(n_tasks, per_step, seed, steps):
    tasks = [Task(id=f"t{i:02d}", instruction="x") for i in range(n_tasks)]
    cursor = TaskCursor(tasks, seed=seed)
    handed: list[str] = []

    async def tied_round(round_tasks, slots) -> GroupResults:
        return GroupResults()  # no mixed group: the step resamples up to its bound

    for rounds, resume in steps:
        if resume:  # a resumed run rebuilds the cursor from the state its last step saved
            cursor = TaskCursor(tasks, seed=seed, state=CursorState.from_json(cursor.state.to_json()))
        plan = SamplingPlan(tasks_per_step=min(per_step, n_tasks), target=1, min_mixed=1, max_rounds=rounds)
        sampled = asyncio.run(sample_step(tied_round, cursor, plan))
        assert len(sampled.task_ids) == plan.tasks_per_step * (rounds + 1)
        _assert_no_early_repeat(sampled.task_ids, n_tasks)
        handed += sampled.task_ids
    for e in range(len(handed) // n_tasks):  # every full epoch is a permutation of the tasks
        assert sorted(handed[e * n_tasks:(e + 1) * n_tasks]) == sorted(t.id for t in tasks)
