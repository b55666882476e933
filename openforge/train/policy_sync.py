"""The rollout engine of a CPU training run and how it gets each new policy (``rollout.engine``).

Owns: :class:`PolicySync` (the seam :class:`~openforge.runner.forge.Forge` calls after every weight change),
:class:`InProcessPolicy` (``transformers``: the back-end serves the trainer's own module),
:class:`VLLMPolicy` (``vllm``: a vLLM server, started through the project's ``scripts/vllm-server.sh``, gets
each new policy over HTTP), :func:`open_engine` (the engine a run asks for, or the transformers one, saying
why, where vLLM cannot run) and :data:`STALE_RULE` (the trainer's side of the versions: :func:`~openforge.train.grpo.stale_calls`).

Versions. Every publication is a new *policy version*: 0 is the policy the run starts from (the loaded model,
with a fresh LoRA adapter when ``trainer.cpu.lora`` is set), then one per change (the SFT warm-start, a resumed
checkpoint, each GRPO optimizer step). The back-end stamps the version it samples with on every call it
serves (``ModelCall.policy_version``), and the trainer trains a step only on calls of the version it holds.

How vLLM gets a version:

- LoRA (``trainer.cpu.lora`` set): the adapter is saved (PEFT's format, megabytes) and loaded at runtime under
  a fresh name ``of<run>-v<N>`` (``POST /v1/load_lora_adapter``; the server runs with ``--enable-lora`` and
  ``VLLM_ALLOW_RUNTIME_LORA_UPDATING``); from then on every request names that adapter as its ``model``, so
  the adapter a call names *is* its version. The previous adapter is unloaded. The base must be the server's
  own model (checked: its ``/v1/models`` root is the run's model directory).
- Full weights: the whole model is saved with its tied embedding written untied (vLLM's in-place reload
  leaves a tied ``lm_head`` stale otherwise) and reloaded in place (``POST /collective_rpc`` ``reload_weights``
  with its ``weights_path``; needs ``VLLM_SERVER_DEV_MODE=1``: ``OPENFORGE_VLLM_DEV_MODE=1 scripts/vllm-server.sh
  start``), then the prefix cache is reset (its keys/values were the old weights').

Stale calls are refused, not importance-corrected (:data:`STALE_RULE`). The clipped loss already divides by the
recorded behaviour logprob, but its clip range is centred on the policy that sampled the batch; a call of an
older version would be trained as if it were on-policy with a ratio far from 1 that the clip then cuts
arbitrarily, and its reward would move the group's baseline. With the synchronous loop (sample a step with the
proxy's calls drained, then train) every call is of the current version, so a stale call means something went
wrong (a push that did not take, a server restarted under the run): its rollout is dropped before the group
statistics, as a text-captured one is, and the step's metrics count it (``stale_rollouts``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..core.errors import BackendError, ConfigError
from .grpo import stale_calls

__all__ = ["STALE_RULE", "EngineChoice", "InProcessPolicy", "PolicySync", "VLLMPolicy", "open_engine",
           "save_untied", "stale_calls", "start_policy", "vllm_script"]

log = logging.getLogger("openforge.train")

STALE_RULE = "refuse"
"""What the trainer does with a call sampled by another policy version: ``refuse`` (its rollout is not trained)."""


class PolicySync(Protocol):
    """What a run needs from its rollout engine: the back-end the proxy serves, and a way to make it serve
    the trainer's current weights as the next version."""

    backend: Any
    version: int | None
    description: str

    async def publish(self) -> float:
        """Serve the trainer's current weights as a new version (``version`` + 1, 0 the first time);
        returns the seconds it took."""
        ...

    async def aclose(self) -> None: ...


class _Trainer(Protocol):
    model: Any

    async def publish(self, backend: Any) -> None: ...


class InProcessPolicy:
    """``rollout.engine=transformers``: the back-end samples with the trainer's own module (no copy), so a
    publication only counts the version (or swaps a state dict in, for a back-end that holds a copy)."""

    def __init__(self, backend: Any, trainer: _Trainer):
        self.backend, self.trainer = backend, trainer
        self.version: int | None = None
        self.description = "transformers (in-process, the trainer's own module)"

    async def publish(self) -> float:
        t = time.perf_counter()
        await self.trainer.publish(self.backend)
        self.version = 0 if self.version is None else self.version + 1
        self.backend.policy_version = self.version
        return time.perf_counter() - t

    async def aclose(self) -> None:
        return None


class _Client(Protocol):
    async def request(self, method: str, url: str, body: Any = None) -> tuple[int, str]: ...


class VLLMPolicy:
    """``rollout.engine=vllm``: ``backend`` (a :class:`~openforge.proxy.backends.vllm.VLLMBackend`) samples on
    a vLLM server; :meth:`publish` hands it the trainer's ``model`` as an adapter (``lora=True``) or whole."""

    def __init__(self, backend: Any, model: Any, *, lora: bool, work_dir: Path, tag: str | None = None,
                 on_close: Callable[[], object] | None = None):
        self.backend, self.model, self.lora = backend, model, lora
        self.work_dir = Path(work_dir)
        self.tag = tag or f"of{uuid.uuid4().hex[:8]}"
        self.version: int | None = None
        self.base_name: str | None = None  # the server's own model name (requests without an adapter)
        self.loaded: str | None = None  # the adapter the server holds for us
        self.on_close = on_close
        self.description = f"vllm at {backend.url} ({'LoRA adapter' if lora else 'full weights'} per step)"
        self.push_s: list[float] = []

    @property
    def _client(self) -> _Client:
        return self.backend._client

    async def check_base(self, model_name: str) -> None:
        """Refuse a server whose model is not the run's ``model_name``: an adapter is trained on one base."""
        data = await self.backend._request("GET", "/v1/models")
        listed = [m for m in data.get("data") or [] if isinstance(m, dict)]
        root = next((m.get("root") for m in listed if m.get("parent") is None), None)
        if not same_base(root, model_name):
            raise ConfigError(f"the vLLM server at {self.backend.url} serves {root}, but this run trains a LoRA adapter "
                              f"on model.name={model_name}: start the server on the run's model "
                              "(OPENFORGE_VLLM_MODEL=DIR scripts/vllm-server.sh start), or use rollout.engine=transformers")

    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        status, text = await self._client.request("POST", self.backend.url + path, body)
        if status != 200:
            raise BackendError(f"vLLM at {self.backend.url} refused POST {path} (HTTP {status}): {text[:400]}")
        return text

    async def publish(self) -> float:
        t = time.perf_counter()
        if self.base_name is None:
            self.base_name = await self.backend._model()
        v = 0 if self.version is None else self.version + 1
        if self.lora:
            await self._push_adapter(v)
        else:
            await self._push_weights()
        self.version = v
        self.backend.policy_version = v  # with the adapter name: one synchronous block, no call in between
        dt = time.perf_counter() - t
        self.push_s.append(dt)
        return dt

    async def _push_adapter(self, v: int) -> None:
        from .lora import save_adapter

        name, d = f"{self.tag}-v{v}", self.work_dir / f"v{v}"
        await asyncio.to_thread(save_adapter, self.model, d)
        try:
            await self._post("/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(d)})
        except BackendError as e:
            raise ConfigError(f"{e}. The server must run with LoRA (--enable-lora, a --max-lora-rank at least "
                              "trainer.cpu.lora.rank, VLLM_ALLOW_RUNTIME_LORA_UPDATING=True): restart it with "
                              "scripts/vllm-server.sh stop; OPENFORGE_VLLM_MAX_LORA_RANK=R scripts/vllm-server.sh "
                              "start") from None
        old, self.loaded = self.loaded, name
        self.backend.model = name
        if old is not None:
            await self._unload(old)
            shutil.rmtree(self.work_dir / f"v{v - 1}", ignore_errors=True)

    async def _unload(self, name: str) -> None:
        try:
            await self._post("/v1/unload_lora_adapter", {"lora_name": name})
        except BackendError as e:  # the server keeps an adapter it no longer serves: harmless, logged
            log.warning("could not unload LoRA adapter %s: %s", name, e)

    async def _push_weights(self) -> None:
        d = self.work_dir / "weights"
        await asyncio.to_thread(save_untied, self.model, d)
        try:
            await self._post("/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": str(d)}})
        except BackendError as e:
            raise ConfigError(f"{e}. Full-weight updates need the server's dev endpoints: restart it with "
                              "scripts/vllm-server.sh stop; OPENFORGE_VLLM_DEV_MODE=1 scripts/vllm-server.sh start "
                              "(or train a LoRA adapter: trainer.cpu.lora)") from None
        await self._post("/reset_prefix_cache", {})

    async def aclose(self) -> None:
        try:
            if self.loaded is not None:
                await self._unload(self.loaded)
                self.loaded = None
        finally:
            shutil.rmtree(self.work_dir, ignore_errors=True)
            if self.on_close is not None:
                self.on_close()


def save_untied(model: Any, path: Path) -> None:
    """``model``'s whole state as one safetensors file with every tensor its own (a tied ``lm_head`` written
    out as a copy of the embedding), the form vLLM's in-place reload takes exactly."""
    from safetensors.torch import save_file

    path.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}
    save_file(state, str(path / "model.safetensors"))


# ------------------------------------------------------------------------------------ choosing the engine


def vllm_script() -> Path | None:
    """``scripts/vllm-server.sh`` of this source checkout (a wheel install has none)."""
    p = Path(__file__).resolve().parents[2] / "scripts" / "vllm-server.sh"
    return p if p.is_file() else None


@dataclass
class EngineChoice:
    """What :func:`open_engine` settled on: ``engine`` (``vllm`` | ``transformers``), the ``note`` the run
    logs (why, when it fell back), and the server to stop at the end when the run started it."""

    engine: str
    note: str
    started_server: bool = False


def _script(cmd: str, timeout_s: float) -> tuple[int, str]:
    script = vllm_script()
    if script is None:
        return 127, "scripts/vllm-server.sh is not here (it comes with a source checkout of openforge)"
    try:
        r = subprocess.run(["bash", str(script), cmd], capture_output=True, text=True, timeout=timeout_s,
                           env={**os.environ})
    except subprocess.TimeoutExpired:
        return 124, f"scripts/vllm-server.sh {cmd} did not finish in {timeout_s:g}s"
    lines = [ln for ln in (r.stderr or "").splitlines() if ln.strip()]
    return r.returncode, (lines[-1] if lines else "").removeprefix("vllm-server: ")


def _answers(url: str) -> bool:
    import urllib.request
    from urllib.parse import urlsplit, urlunsplit

    base = urlunsplit(urlsplit(url)._replace(query="", fragment="")).rstrip("/").removesuffix("/v1")
    try:
        with urllib.request.urlopen(base + "/v1/models", timeout=5) as r:
            return r.status == 200
    except (OSError, ValueError):
        return False


def open_engine(asked: str, url: str, *, start: bool, script: Callable[[str, float], tuple[int, str]] = _script,
                answers: Callable[[str], bool] = _answers) -> EngineChoice:
    """The engine the run can use: ``vllm`` when a server answers at ``url`` (started through
    ``scripts/vllm-server.sh start`` when none does and ``start``); ``transformers`` otherwise, with the
    reason (``probe`` exit 3: this machine cannot run vLLM's CPU build; no server and none could be started)."""
    if asked != "vllm":
        return EngineChoice("transformers", "rollout engine: transformers (in-process)")
    fallback = "vLLM cannot run here, so this run samples with the transformers back-end instead"
    if answers(url):
        return EngineChoice("vllm", f"rollout engine: vllm at {url}")
    if not start:
        return EngineChoice("transformers", f"{fallback}: no vLLM server answers at {url} "
                            "(rollout.vllm_start is off)")
    rc, why = script("probe", 30.0)
    if rc != 0:
        return EngineChoice("transformers", f"{fallback}: {why or f'the probe failed (exit {rc})'}")
    rc, why = script("start", 900.0)
    if rc != 0 or not answers(url):
        return EngineChoice("transformers", f"{fallback}: scripts/vllm-server.sh start failed (exit {rc}): {why}")
    return EngineChoice("vllm", f"rollout engine: vllm at {url} (started by this run: {why})", started_server=True)


def same_base(served_root: str | None, model_name: str) -> bool:
    """Whether the server's model (its ``/v1/models`` root) is the run's ``model.name`` (a LoRA adapter
    trained on one base means nothing on another)."""
    if not served_root:
        return False
    from ..proxy.backends.hf_loading import _CACHE_NAME, SMOLLM2_ALIASES, cache_dir
    from ..util.modeldir import resolve_model_name

    name = resolve_model_name(model_name)
    mine = cache_dir() / _CACHE_NAME if name.lower() in SMOLLM2_ALIASES else Path(name).expanduser()
    try:
        return Path(served_root).resolve() == mine.resolve()
    except OSError:
        return False


async def start_policy(choice: EngineChoice, backend: Any, trainer: _Trainer, cfg: Any, run_dir: Path) -> PolicySync:
    """The run's :class:`PolicySync` for ``choice``, serving version 0 (the policy the run starts from)."""
    if choice.engine != "vllm":
        policy: PolicySync = InProcessPolicy(backend, trainer)
    else:
        lora = cfg.trainer.cpu.lora is not None
        stop = (lambda: _script("stop", 120.0)) if choice.started_server else None
        vp = VLLMPolicy(backend, trainer.model, lora=lora, work_dir=Path(run_dir) / "vllm-policy", on_close=stop)
        if lora:
            await vp.check_base(cfg.model.name)
        policy = vp
    await policy.publish()
    return policy
