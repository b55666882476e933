"""Ctrl-C during a CPU training step: the step (a worker thread) stops within one micro-batch.

Before, cancelling the run's task left the thread training to the end of its step (minutes on a CPU)
and the interpreter waited for it. The trainer now checks a stop event between micro-batches, drops
the partial gradient, and raises ``TrainingStopped``; ``run_stoppable`` sets that event when the
awaiting task is cancelled and waits for the thread to return."""

from __future__ import annotations

import asyncio
import copy
import threading
import time

import pytest

from openforge.core.errors import TrainingStopped
from openforge.train.cpu import CPUTrainer, CPUTrainerConfig
from openforge.train.grpo import TrainSample
from openforge.train.sft import sft_train
from openforge.train.stop import run_stoppable

from .test_dynamic_sampling import cursor, forge_factory  # noqa: F401 (a fixture)

torch = pytest.importorskip("torch")


class SlowWork:
    """Stands in for a training step or the SFT: runs ~10 s unless its ``stop`` event is set, then
    raises ``TrainingStopped`` as the trainer does; records that it saw the event."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.stopped: list[bool] = []

    def __call__(self, *_: object, stop: threading.Event | None = None, **__: object) -> dict:
        self.entered.set()
        for _ in range(500):
            if stop is not None and stop.is_set():
                self.stopped.append(True)
                raise TrainingStopped("stopped on request")
            time.sleep(0.02)
        return {"trained_tokens": 1.0}

    async def cancel_once_running(self, task: asyncio.Future) -> None:
        """Cancel ``task`` once the work runs; its cancellation must come after the work stopped."""
        assert await asyncio.to_thread(self.entered.wait, 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert self.stopped == [True]


def _samples(n: int = 4) -> list[TrainSample]:
    g = torch.Generator().manual_seed(3)
    out = []
    for i in range(n):
        ids = torch.randint(2, 96, (20,), generator=g).tolist()
        mask = [0] * 10 + [1] * 10
        out.append(TrainSample(input_ids=ids, loss_mask=mask, old_logprobs=[-4.0 * m for m in mask],
                               advantage=1.0 if i % 2 else -1.0, token_weights=[m / 10 for m in mask]))
    return out


def test_stop_between_micro_batches_takes_no_optimizer_step(tiny_llama):
    tr = CPUTrainer(tiny_llama, CPUTrainerConfig(lr=1e-2, micro_batch_tokens=20))  # one sample per micro-batch
    before = copy.deepcopy(tiny_llama.state_dict())
    stop = threading.Event()
    seen: list[int] = []

    def progress(done: int, total: int) -> None:
        seen.append(done)
        stop.set()  # Ctrl-C arrives while the first micro-batch runs

    with pytest.raises(TrainingStopped, match="grpo step 1: stopped"):
        tr.step(_samples(), progress=progress, stop=stop)
    assert seen == [1]  # the three other micro-batches never ran
    assert tr.step_count == 0 and all(p.grad is None for p in tr.params)  # partial gradient dropped
    for k, v in tiny_llama.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert tr.step(_samples())["trained_tokens"] == 40  # the trainer is usable afterwards


def test_sft_train_stops(tiny_llama):
    stop = threading.Event()
    stop.set()
    with pytest.raises(TrainingStopped, match="sft step 1"):
        sft_train(tiny_llama, _samples(), lr=1e-3, epochs=3, batch_size=2, stop=stop)


async def test_cancelling_run_stoppable_stops_the_thread_before_it_returns():
    work = SlowWork()
    t0 = time.monotonic()
    await work.cancel_once_running(asyncio.ensure_future(run_stoppable(work, 7)))
    assert time.monotonic() - t0 < 5  # not the ~10 s the work would have run


async def test_run_stoppable_returns_the_result():
    def work(a: int, b: int, *, stop: threading.Event) -> int:
        assert not stop.is_set()
        return a + b

    assert await run_stoppable(work, 2, b=3) == 5


async def test_cancelling_the_warm_start_stops_its_sft(monkeypatch, tmp_path):
    """The SFT warm-start's training thread gets the stop event too (``sft.data``: no teacher)."""
    import contextlib
    import json

    from openforge.config import RunConfig
    from openforge.runner import teacher

    data = tmp_path / "tokens.jsonl"
    data.write_text(json.dumps({"input_ids": [5, 6, 7, 8], "loss_mask": [0, 0, 1, 1]}) + "\n")
    cfg = RunConfig(run_dir=str(tmp_path), sft={"data": str(data), "cache": False})
    work = SlowWork()

    class Served:  # the session as the warm-start uses it: an environment, a pausable proxy
        environment = object()

        @contextlib.asynccontextmanager
        async def paused(self):
            yield

    monkeypatch.setattr(teacher, "warm_start_key", lambda *a: "k")
    monkeypatch.setattr(teacher, "sft_train", work)
    await work.cancel_once_running(asyncio.ensure_future(teacher.warm_start(
        Served(), cfg, [], model=None, tokenizer=None, run_dir=tmp_path, log=lambda _m: None)))


async def test_cancelling_the_run_stops_its_training_step(forge_factory):  # noqa: F811
    """Ctrl-C cancels the run's task; the step's thread sees the stop event and returns before the
    cancellation finishes (with a plain ``to_thread`` it would train on, and exit would wait for it)."""
    f = await forge_factory([[[1.0, 0.0], [1.0, 1.0]]], target_mixed_groups=1)
    f.trainer.step = work = SlowWork()
    await work.cancel_once_running(asyncio.ensure_future(f._grpo_step(0, cursor())))
