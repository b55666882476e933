"""oneDNN-packed linear weights for the transformers back-end's forward passes on CPU.

Owns: :class:`PackedLinears` — a copy of every ``nn.Linear`` weight of a model, reordered once into
oneDNN's blocked layout (``torch.ops.mkldnn._reorder_linear_weight``), and a thread-local
``TorchFunctionMode`` under which the model's ``F.linear`` calls run oneDNN's kernel on that copy
(``torch.ops.mkldnn._linear_pointwise``) instead of MKL's on the plain weight.

Why: decoding a few rows at a time is a matrix product of a handful of rows with every weight of the
model. On 2 CPU cores MKL's kernel for that shape runs far below the memory bandwidth, and the linears were
69 % of a decode step of SmolLM2-135M; with the packed copy a step takes 0.6-0.8x the time at 2-8 rows and
a prefill 0.8x (``benchmarks/packed_linears.py``). In a closed loop of the main job's held-out calls (4
clients, 160 tokens each) the back-end took 0.88x the wall time. Opt-in
(``TransformersBackend(packed_linears=True)``): the copy costs memory the CPU default's 4 GB budget lacks.

Exactness: the same weights, another kernel, so logits equal up to float rounding (max 1e-4..2e-3 on
SmolLM2's logits), as with batching; each sampled token's logprob is still exactly the one the serving
forward computed. The weights' identity and version counters are checked on every entry: an optimizer
step, a ``load_state_dict`` or a replaced tensor drops the copy, which is rebuilt from the new weights;
a forward that needs gradients, another dtype or a weight not in the copy runs the plain ``F.linear``.

Memory: the copy is as large as the model's linear weights (0.53 GiB for SmolLM2-135M in fp32). It lives
while calls are served and goes with :meth:`release` (the back-end's ``release_caches``: a pause for
training), so a training step does not hold it.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

from ...util.heap import trim_heap
from .hf_prefix import weights_version

__all__ = ["PackedLinears", "packing_supported"]

#: the batch size oneDNN's layout is chosen for (any number of rows runs on it)
_BATCH_HINT = 8


def packing_supported(model: Any) -> bool:
    """Whether ``model``'s linears can run on packed copies here: torch with oneDNN, weights in fp32 on
    the CPU."""
    try:
        import torch

        if not torch.backends.mkldnn.is_available():
            return False
        ops = torch.ops.mkldnn
        if not (hasattr(ops, "_reorder_linear_weight") and hasattr(ops, "_linear_pointwise")):
            return False
        p = next(model.parameters())
    except (ImportError, StopIteration, AttributeError, RuntimeError):
        return False
    return p.device.type == "cpu" and p.dtype == torch.float32


class PackedLinears:
    """Packed copies of ``model``'s linear weights, made on first use and dropped when the weights change
    or on :meth:`release` (see the module docstring). ``with packed.active(): model(...)`` runs the
    model's linears on them in this thread."""

    def __init__(self, model: Any):
        self.model = model
        self._packed: dict[int, tuple[Any, Any]] = {}  # id(weight) -> (weight, packed copy)
        self._version: tuple[int, ...] | None = None
        self.supported = packing_supported(model)
        self.packs = 0  # times the copy was (re)built (observability, tests)

    def __len__(self) -> int:
        return len(self._packed)

    @property
    def nbytes(self) -> int:
        return sum(p.numel() * p.element_size() for _, p in self._packed.values())

    def release(self) -> None:
        """Drop the copy (its pages go back to the system)."""
        if self._packed:
            self._packed = {}
            self._version = None
            trim_heap()

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Run the model's linears on the packed copy in this thread (plain ``F.linear`` where packing is
        not supported)."""
        if not self.supported:
            yield
            return
        self._refresh()
        with _packed_mode()(self._packed):
            yield

    def _refresh(self) -> None:
        v = weights_version(self.model)
        if v == self._version and self._packed:
            return
        self.release()
        import torch

        packed: dict[int, tuple[Any, Any]] = {}
        with torch.no_grad():
            for m in self.model.modules():
                if not isinstance(m, torch.nn.Linear):
                    continue
                w = m.weight
                if id(w) not in packed and w.dtype == torch.float32 and w.device.type == "cpu":
                    packed[id(w)] = (w, torch.ops.mkldnn._reorder_linear_weight(w.detach().contiguous(), _BATCH_HINT))
        self._packed, self._version = packed, v
        self.packs += 1


@functools.cache
def _packed_mode() -> type:
    """The ``TorchFunctionMode`` class (made on first use: torch is imported lazily)."""
    from torch.overrides import TorchFunctionMode

    class PackedMode(TorchFunctionMode):
        """``F.linear(x, w, b)`` with ``w`` in ``packed`` → oneDNN's linear on the packed copy (fp32 input,
        no gradient wanted); every other call runs as it is."""

        def __init__(self, packed: dict[int, tuple[Any, Any]]):
            super().__init__()
            self.packed = packed

        def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            import torch

            kwargs = kwargs or {}
            if func is torch.nn.functional.linear:
                x = args[0] if args else kwargs.get("input")
                w = args[1] if len(args) > 1 else kwargs.get("weight")
                entry = self.packed.get(id(w))
                if entry is not None and entry[0] is w and x.dtype == torch.float32 and x.device.type == "cpu" \
                        and not (torch.is_grad_enabled() and (x.requires_grad or w.requires_grad)):
                    b = args[2] if len(args) > 2 else kwargs.get("bias")
                    return torch.ops.mkldnn._linear_pointwise(x, entry[1], b, "none", [], "")
            return func(*args, **kwargs)

    return PackedMode
