"""A CPU rollout engine behind veRL's own server-manager interface (``rollout.name=transformers``).

Owns: :class:`TransformersReplica` (veRL's ``RolloutReplica``: launches one server actor per
replica), :class:`TransformersRolloutServer` (the Ray actor veRL's ``LLMServerClient`` calls
``generate(request_id, prompt_ids, sampling_params)`` on; it serves openforge's
:class:`~openforge.proxy.backends.transformers.TransformersBackend`, exact ids and logprobs) and
:class:`TransformersServerAdapter` (veRL's ``BaseRollout`` in the actor workers: after every step it
receives the actor's weights from veRL and hands them to the server).

Weight sync: the adapter on the replica's first rank collects the named tensors veRL streams out of
the FSDP engine, writes them to one safetensors file under the run's temp dir and asks the server to
load it (no Ray object store traffic: 540 MB for SmolLM2-135M in fp32 would not fit a small store).
The server loads the file between two generation batches, tags every later output with the step
(``extra_fields["global_steps"]``, veRL's staleness bookkeeping) and, when
``OPENFORGE_VERL_PROBE_DIR`` is set, appends one line to ``probe.jsonl`` there: the step, a digest of
its weights, the logprobs it serves for a fixed prompt (so a test can tell that the engine serves
the new weights after each step) and the network interfaces it sees (``["lo"]`` in a loopback-only run).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import ray
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, TokenOutput

__all__ = ["PROBE_PROMPT", "TransformersReplica", "TransformersRolloutServer", "TransformersServerAdapter",
           "server_name"]

PROBE_ENV = "OPENFORGE_VERL_PROBE_DIR"
PROBE_PROMPT = "<|im_start|>user\nList the files in the current directory.<|im_end|>\n<|im_start|>assistant\n"
PROBE_ANSWER = '{"tool": "bash", "args": {"cmd": "ls"}}<|im_end|>'


def server_name(replica_rank: int, suffix: str = "") -> str:
    return f"openforge_cpu_rollout_{replica_rank}{suffix}"


class TransformersRolloutServer:
    """Token in, token out on CPU with the actor's latest weights (a Ray actor, one per replica)."""

    def __init__(self, model_path: str, replica_rank: int, max_batch: int = 8):
        import torch

        from ...proxy.backends.hf_loading import load_model
        from ...proxy.backends.transformers import TransformersBackend

        torch.set_num_threads(max(1, int(os.environ.get("OPENFORGE_VERL_ROLLOUT_THREADS", "2"))))
        model, tok = load_model(model_path)
        self.backend = TransformersBackend(model, tok, max_batch=max_batch)
        self.replica_rank = replica_rank
        self.global_steps: int | None = None
        self.loads = 0
        self._probe()

    def _weights_digest(self) -> str:
        h = hashlib.sha256()
        for name, t in sorted(self.backend.model.state_dict().items()):
            h.update(name.encode())
            h.update(t.detach().float().contiguous().numpy().tobytes())
        return h.hexdigest()[:16]

    def probe_logprobs(self) -> list[float]:
        """Logprobs the served weights give :data:`PROBE_ANSWER` after :data:`PROBE_PROMPT` (teacher-forced)."""
        import torch

        tok = self.backend.tokenizer
        prompt = tok.encode(PROBE_PROMPT, add_special_tokens=False)
        answer = tok.encode(PROBE_ANSWER, add_special_tokens=False)
        ids = torch.tensor([prompt + answer])
        with torch.no_grad():
            logits = self.backend.model(ids).logits[0, len(prompt) - 1 : -1].float()
        lp = torch.log_softmax(logits, -1).gather(-1, torch.tensor(answer)[:, None])[:, 0]
        return [float(x) for x in lp]

    def _probe(self) -> None:
        out = os.environ.get(PROBE_ENV)
        if not out:
            return
        from .netns import interfaces

        rec = {"replica": self.replica_rank, "global_steps": self.global_steps, "loads": self.loads,
               "weights": self._weights_digest(), "logprobs": self.probe_logprobs(), "time": time.time(),
               "interfaces": interfaces()}
        Path(out).mkdir(parents=True, exist_ok=True)
        with open(Path(out) / "probe.jsonl", "a") as f:
            f.write(json.dumps(rec) + "\n")

    async def load_weights(self, path: str, global_steps: int | None = None) -> dict[str, Any]:
        """Load the actor's weights from ``path`` (safetensors) between generation batches."""
        from safetensors.torch import load_file

        state = load_file(path)
        model = self.backend.model
        own = model.state_dict()
        unknown = sorted(set(state) - set(own))
        if unknown:
            raise ValueError(f"weights from the actor name parameters the rollout model lacks: {unknown[:5]}")
        missing = sorted(k for k in set(own) - set(state) if not _tied(model, k))
        if missing:
            raise ValueError(f"weights from the actor miss rollout parameters: {missing[:5]}")
        await self.backend.swap_weights({**own, **state})
        if getattr(model.config, "tie_word_embeddings", False):
            model.tie_weights()
        self.global_steps = global_steps
        self.loads += 1
        self._probe()
        return {"loaded": len(state), "global_steps": global_steps}

    async def generate(self, request_id: str, prompt_ids: list[int], sampling_params: dict[str, Any],
                       **kwargs: Any) -> TokenOutput:
        from ...proxy.backends.base import SamplingParams

        sp = SamplingParams(temperature=float(sampling_params.get("temperature", 1.0)),
                            top_p=float(sampling_params.get("top_p", 1.0)),
                            top_k=int(sampling_params.get("top_k", -1)),
                            max_tokens=int(sampling_params.get("max_tokens") or sampling_params.get("max_new_tokens")
                                           or 256),
                            stop_token_ids=sampling_params.get("stop_token_ids") or None)
        gen = await self.backend.generate(list(prompt_ids), sp)
        stop = {"length": "length", "cancelled": "aborted"}.get(gen.finish_reason, "completed")
        return TokenOutput(token_ids=gen.output_ids, log_probs=gen.logprobs, stop_reason=stop,
                           extra_fields={"global_steps": self.global_steps})

    async def wake_up(self) -> None:
        pass

    async def sleep(self) -> None:
        pass

    async def abort_all_requests(self, reject_request: bool = False) -> None:
        pass

    async def resume_generation(self) -> None:
        pass

    async def clear_kv_cache(self) -> None:
        pass

    async def release_kv_cache(self) -> None:
        pass

    async def resume_kv_cache(self) -> None:
        pass

    async def start_profile(self, **kwargs: Any) -> None:
        pass

    async def stop_profile(self) -> None:
        pass


def _model_dir(model_config: Any) -> str:
    """The model directory: veRL hands replicas ``actor_rollout_ref.model`` as a DictConfig (``path``) or
    as an ``HFModelConfig`` (``local_path``, its local copy)."""
    local = getattr(model_config, "local_path", None) if not hasattr(model_config, "_get_node") else \
        model_config.get("local_path", None)
    return str(local or model_config.path)


def _tied(model: Any, name: str) -> bool:
    return name == "lm_head.weight" and bool(getattr(model.config, "tie_word_embeddings", False))


class TransformersReplica(RolloutReplica):
    """One :class:`TransformersRolloutServer` per replica (no GPU, no HTTP: veRL's server manager
    calls the actor handle)."""

    async def launch_servers(self) -> None:
        actor = ray.remote(num_cpus=0)(TransformersRolloutServer)
        server = actor.options(name=server_name(self.replica_rank, self.name_suffix),
                               max_concurrency=self.max_concurrency).remote(
            _model_dir(self.model_config), self.replica_rank, max(1, min(int(self.config.max_num_seqs), 8)))
        await server.probe_logprobs.remote()  # loaded and answering before veRL routes to it
        self.servers = [server]
        self._server_handle = server
        self._server_address = f"ray://{server_name(self.replica_rank, self.name_suffix)}"

    def rollout_worker_use_gpu(self) -> bool:
        return False


class TransformersServerAdapter(BaseRollout):
    """veRL's rollout object inside each actor worker: forwards the actor's weights to the server."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, *args: Any, replica_rank: int = -1,
                 **kwargs: Any):
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", "0"))
        world = (self.config.tensor_model_parallel_size * self.config.data_parallel_size
                 * self.config.pipeline_model_parallel_size)
        self.replica_rank = rank // world if replica_rank == -1 else replica_rank
        self.owns_server = rank % world == 0
        self.sleep_level = 1

    async def resume(self, tags: list[str]) -> None:
        pass

    async def release(self) -> None:
        pass

    async def update_weights(self, weights: Any, wire_format: str = "named_tensors", global_steps: int | None = None,
                             **kwargs: Any) -> None:
        if wire_format != "named_tensors":
            raise ValueError(f"the CPU transformers rollout takes full named tensors, not {wire_format!r}")
        if kwargs.get("peft_config") is not None:
            raise ValueError("the CPU transformers rollout takes merged weights (model.lora.merge=true)")
        state: dict[str, Any] = {}
        for name, tensor in weights:  # every rank iterates: the FSDP engine gathers collectively
            full = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
            if self.owns_server:
                state[name] = full.detach().to("cpu").contiguous().clone()
        if not self.owns_server:
            return
        from safetensors.torch import save_file

        fd, path = tempfile.mkstemp(prefix="openforge-verl-weights-", suffix=".safetensors")
        os.close(fd)
        try:
            save_file(state, path)
            server = ray.get_actor(server_name(self.replica_rank))
            await server.load_weights.remote(path, global_steps)
        finally:
            os.unlink(path)
