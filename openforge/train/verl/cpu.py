"""veRL 0.9.1 on CPU: a ``cpu`` platform for ``verl.plugin.platform`` and the registrations it needs.

Owns: :class:`CPUPlatform` and the registrations done on import (the environment that loads it is
:func:`openforge.train.verl.launch.run_env`). veRL imports this module in every process of a run (driver,
TaskRunner, actor workers, agent-loop workers, rollout servers) when the run's environment says
``VERL_USE_EXTERNAL_MODULES=openforge.train.verl.cpu`` and ``VERL_PLATFORM=cpu``; it is never
imported by openforge itself outside such a run.

What veRL 0.9.1 needs on CPU, found by running ``verl.trainer.main_ppo`` here:

* a platform whose collective backend is ``gloo`` and whose "current device" is
  ``torch.device("cpu")`` (veRL hands ``get_device_id()`` to ``.to()`` / ``device=``, where an integer
  would mean ``cuda:<i>``), with a stand-in for ``torch.cuda`` (memory info, RNG state, no-op caches);
* ``initialize_global_process_group_ray`` called with ``backend="gloo"`` (its default
  ``"cpu:gloo,{device}:{backend}"`` becomes the invalid ``"cpu:gloo,cpu:gloo"`` on a CPU platform);
* the FSDP engines registered for ``device="cpu"`` (veRL registers them for cuda and npu only) and the
  ``fsdp2`` strategy (FSDP1 passes an integer ``device_id``);
* logical GPUs declared to Ray (``+ray_kwargs.ray_init.num_gpus``): veRL's resource pools count Ray's
  ``GPU`` resource, which this platform names as its resource;
* a rollout engine that runs on CPU: ``actor_rollout_ref.rollout.name=transformers``
  (:mod:`openforge.train.verl.cpu_replica`), registered here under veRL's own replica and adapter
  registries.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import torch
from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry

__all__ = ["ROLLOUT_NAME", "CPUPlatform"]

ROLLOUT_NAME = "transformers"


class _HostDevice(ModuleType):
    """Stands in for ``torch.cuda`` on the CPU platform: what exists on ``torch.cpu`` is used, host
    memory answers ``mem_get_info``, RNG state is torch's global one, everything else is a no-op."""

    def __init__(self) -> None:
        super().__init__("openforge_cpu_device")

    @staticmethod
    def mem_get_info(device: Any = None) -> tuple[int, int]:
        page = os.sysconf("SC_PAGE_SIZE")
        return os.sysconf("SC_AVPHYS_PAGES") * page, os.sysconf("SC_PHYS_PAGES") * page

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        return "CPU"

    @staticmethod
    def get_rng_state(device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state: torch.Tensor, device: Any = None) -> None:
        torch.set_rng_state(state)

    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def memory_allocated(device: Any = None) -> int:
        return 0

    memory_reserved = max_memory_allocated = max_memory_reserved = memory_allocated

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if hasattr(torch.cpu, name):
            return getattr(torch.cpu, name)
        return _noop


def _noop(*args: Any, **kwargs: Any) -> int:
    return 0


@PlatformRegistry.register(platform="cpu")
class CPUPlatform(PlatformBase):
    """veRL's ``cpu`` platform: gloo, ``torch.device('cpu')`` as the current device, one device per
    process, Ray's ``GPU`` resource as the logical unit veRL's resource pools schedule on."""

    _device = _HostDevice()

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> ModuleType:
        return self._device

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return False  # chosen only explicitly, by VERL_PLATFORM=cpu

    def current_device(self) -> Any:
        return torch.device("cpu")  # an int would be read as cuda:<int> by .to()/device=

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        pass

    def synchronize(self, device_index: int | None = None) -> None:
        pass

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        pass

    def empty_cache(self) -> None:
        pass

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "OPENFORGE_VERL_VISIBLE_CPUS"

    @contextmanager
    def nvtx_range(self, msg: str) -> Iterator[None]:
        yield

    def profiler_start(self) -> None:
        pass

    def profiler_stop(self) -> None:
        pass

    def ray_resource_name(self) -> str:
        return "GPU"  # veRL's pools count Ray "GPU": the CPU run declares logical ones

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None


def _register() -> None:
    """The registrations veRL needs on CPU; its modules below read the platform on import, so they are
    imported only now that the ``cpu`` platform exists."""
    from verl.utils import distributed
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead, FSDPEngineWithValueHead
    from verl.workers.rollout import base as rollout_base
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    if not getattr(distributed.initialize_global_process_group_ray, "_openforge_cpu", False):
        original = distributed.initialize_global_process_group_ray

        def initialize_gloo(timeout_second: Any = None, backend: str | None = None) -> Any:
            return original(timeout_second=timeout_second, backend=backend or "gloo")

        initialize_gloo._openforge_cpu = True  # type: ignore[attr-defined]
        distributed.initialize_global_process_group_ray = initialize_gloo
    for backend in ("fsdp", "fsdp2"):
        EngineRegistry.register(model_type="language_model", backend=backend, device="cpu")(FSDPEngineWithLMHead)
        EngineRegistry.register(model_type="value_model", backend=backend, device="cpu")(FSDPEngineWithValueHead)
    rollout_base._ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] = "openforge.train.verl.cpu_replica.TransformersServerAdapter"

    def _replica() -> type:
        from .cpu_replica import TransformersReplica

        return TransformersReplica

    RolloutReplicaRegistry.register(ROLLOUT_NAME, _replica)


_register()
