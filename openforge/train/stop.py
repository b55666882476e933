"""Stoppable training work in a worker thread: Ctrl-C reaches a CPU training step within one micro-batch.

A training step runs in a thread (``asyncio.to_thread``) so that the proxy keeps serving while it runs.
A thread cannot be cancelled: before this, Ctrl-C cancelled the run's task at once but the interpreter
then waited for the whole step (minutes on a CPU) before it could exit. :func:`run_stoppable` hands
the work a :class:`threading.Event`; the trainer checks it between micro-batches
(:meth:`~openforge.train.cpu.CPUTrainer.step`, :func:`~openforge.train.sft.sft_train`) and raises
:class:`~openforge.core.errors.TrainingStopped`.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["run_stoppable"]

T = TypeVar("T")


async def run_stoppable(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, stop=event, **kwargs)`` in a worker thread. When the awaiting task is cancelled,
    set ``event``, wait for the thread to return (it checks ``event`` between micro-batches), then
    re-raise the cancellation: the caller's clean-up runs after the step, not beside it."""
    stop = threading.Event()
    work = asyncio.ensure_future(asyncio.to_thread(fn, *args, stop=stop, **kwargs))
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:
        stop.set()
        with contextlib.suppress(Exception):  # TrainingStopped, or whatever the step ended with
            await work
        raise
