"""The task cursor hands out every task once per epoch, reshuffles each epoch from the run's seed, never
repeats a task inside one step while the epoch has others, and resumes exactly from its saved state."""

from __future__ import annotations

import json

import pytest

from openforge.core.task import Task
from openforge.runner.task_cursor import CursorState, TaskCursor

TASKS = [Task(id=f"task-{i:02d}", instruction="x") for i in range(12)]


def _ids(tasks):
    return [t.id for t in tasks]


def test_every_epoch_is_a_permutation_reshuffled():
    cur = TaskCursor(TASKS, seed=7)
    epochs = [_ids(cur.take(12)) for _ in range(6)]
    for e in epochs:
        assert sorted(e) == sorted(_ids(TASKS))  # each task exactly once per epoch
    assert len({tuple(e) for e in epochs}) == 6  # a new order at every epoch
    assert cur.epoch == 5 and cur.drawn == 72 and cur.epochs == 6.0


def test_takes_that_do_not_divide_the_epoch_still_see_every_task_once_per_epoch():
    cur = TaskCursor(TASKS, seed=0)
    seq = [t for _ in range(30) for t in _ids(cur.take(5))]  # 150 draws: 12 full epochs and 6 more
    for e in range(12):
        assert sorted(seq[12 * e:12 * (e + 1)]) == sorted(_ids(TASKS))
    counts = {t: seq.count(t) for t in _ids(TASKS)}
    assert set(counts.values()) == {12, 13}


def test_a_draw_across_an_epoch_boundary_repeats_no_task():
    for seed in range(40):
        cur = TaskCursor(TASKS, seed=seed)
        cur.take(9)
        step = _ids(cur.take(4))  # 3 from epoch 0, 1 from epoch 1
        more = _ids(cur.take(4, avoid=step))  # a resample round of the same step
        assert len(set(step + more)) == 8, (seed, step, more)


def test_same_seed_same_sequence_other_seed_other():
    a, b, c = (TaskCursor(TASKS, seed=s) for s in (3, 3, 4))
    sa, sb, sc = ([_ids(x.take(4)) for _ in range(9)] for x in (a, b, c))
    assert sa == sb and sa != sc


def test_state_round_trips_through_json_and_resumes_exactly():
    whole = TaskCursor(TASKS, seed=1)
    expected = [_ids(whole.take(n)) for n in (4, 4, 8, 4, 12, 4, 4, 7, 4)]
    first = TaskCursor(TASKS, seed=1)
    got = [_ids(first.take(n)) for n in (4, 4, 8, 4, 12)]
    saved = json.loads(json.dumps(first.state.to_json()))  # as index.json stores it
    again = TaskCursor(TASKS, seed=1, state=CursorState.from_json(saved))
    got += [_ids(again.take(n)) for n in (4, 4, 7, 4)]
    assert got == expected


def test_a_state_for_other_tasks_or_a_broken_one_is_refused():
    state = TaskCursor(TASKS, seed=0).state
    with pytest.raises(ValueError, match="another set of tasks"):
        TaskCursor(TASKS[:11], seed=0, state=state)
    with pytest.raises(ValueError, match="not a task cursor state"):
        CursorState.from_json({"epoch": 1})
    with pytest.raises(ValueError, match="cannot draw 13 tasks from 12"):
        TaskCursor(TASKS, seed=0).take(13)
    with pytest.raises(ValueError, match="unique"):
        TaskCursor([*TASKS, TASKS[0]], seed=0)
