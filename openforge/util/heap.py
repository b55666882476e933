"""Giving freed memory back to the system.

Owns: :func:`trim_heap` (glibc's ``malloc_trim``) and :func:`release_memory` (garbage collection, then a
trim). PyTorch's CPU tensors come from the C heap; glibc keeps freed chunks for reuse, and the growing
key/value tensors of a decode batch or a training step's activations leave free holes it never hands back
on its own, so a process's RSS keeps what it once used. A trim returns every free page (no-op without
glibc).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

__all__ = ["release_memory", "trim_heap"]


def trim_heap() -> None:
    """glibc's ``malloc_trim(0)``: free heap pages go back to the system (a no-op without glibc)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def release_memory() -> None:
    """Collect garbage and trim the heap, so a finished phase's tensors (a training step's activations, a
    decoding batch's KV cache) stop counting in the process's RSS."""
    import gc

    gc.collect()
    trim_heap()


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None
