"""The built-in CPU trainer: GRPO (and SFT) steps in plain PyTorch on the back-end's own model.

Owns: :class:`CPUTrainer` (AdamW, gradient accumulation over
length-sorted micro-batches of segments, grad clipping, the KL reference policy, checkpoint
save/resume, weight publication to the serving back-end). Logprobs and micro-batches are
:mod:`openforge.train.logprobs`'s. Its settings,
:class:`~openforge.config.CPUTrainerConfig`, live with the other configs (re-exported here).

KL reference. With ``kl_coef > 0`` the reference is the policy GRPO *starts from*: a frozen copy
taken at the first GRPO step (so after the SFT warm-start and after a checkpoint resume), or set
explicitly with :meth:`CPUTrainer.set_reference`. It is saved with every checkpoint
(``reference.safetensors``) so a resumed run keeps the reference of the run it continues. Its
logprobs are computed once per step, before the first epoch, never by swapping state dicts.

Memory and time. Each micro-batch's logprobs come from :func:`~openforge.train.logprobs.token_logprobs`:
the head in checkpointed chunks and only at trained positions, and a prompt prefix the micro-batch's
segments share run once (``share_prefix``); :func:`~openforge.train.logprobs.pack_microbatches` fits
micro-batches to ``micro_batch_tokens`` counting that prefix once. ``gradient_checkpointing`` recomputes
each decoder layer in backward; ``trim_memory`` hands the heap's free pages back before the step and after
each micro-batch (:mod:`openforge.util.heap`), so the step's peak RSS is what it holds, not what glibc kept.

Consistency. The trainer computes ``log_softmax(logits / temperature)`` in fp32 with the model in
eval mode (no dropout), the exact quantity :class:`~openforge.proxy.backends.transformers.
TransformersBackend` records, so importance ratios start at 1 (|Δ| ≈ 1e-5; bf16 would be ~0.2).
The step reports that gap as ``behaviour_logprob_gap``.

Stopping. A step runs in a worker thread; :meth:`CPUTrainer.step` checks its ``stop`` event between
micro-batches, so Ctrl-C ends it within one micro-batch (:mod:`openforge.train.stop`).

LoRA (``lora`` set, :mod:`openforge.train.lora`). The adapter is injected into the module itself (the
back-end keeps serving it: rollouts sample base + adapter); only its parameters train and only they have
AdamW state; :meth:`save` writes the adapter (and an adapter-only KL reference), :meth:`load` reads it back.
``lora.dropout`` is active in training steps only (the flag is raised on the adapter's dropout modules for
the step, as for gradient checkpointing).

Weights. When the trainer holds the back-end's own module (the default) the update *is* the new
policy; the caller pauses the proxy around :meth:`CPUTrainer.step` (pause → step → resume), see
:meth:`CPUTrainer.publish`. Otherwise :meth:`publish` swaps the new state dict into the back-end.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

from ..config import CPUTrainerConfig
from ..core.errors import TrainingStopped
from ..util.heap import release_memory, trim_heap
from .grpo import TrainSample, policy_loss
from .logprobs import PREFIX_MODELS, pack_microbatches, shared_prefix, token_logprobs

__all__ = ["REFERENCE_FILE", "CPUTrainer", "CPUTrainerConfig", "WeightServer"]

REFERENCE_FILE = "reference.safetensors"


class WeightServer(Protocol):
    """What :meth:`CPUTrainer.publish` needs from a serving back-end (e.g.
    :class:`~openforge.proxy.backends.transformers.TransformersBackend`): the module it serves, and a
    way to load new weights into it between generation batches."""

    model: Any

    async def swap_weights(self, state_dict: dict[str, Any]) -> None: ...


def use_bf16_autocast(setting: bool | str) -> bool:
    """Resolve an ``autocast_bf16`` setting: ``"auto"`` is on only where this CPU computes bf16
    natively (AVX512-BF16 or AMX); elsewhere torch emulates it, many times slower than fp32."""
    if setting != "auto":
        return bool(setting)
    import torch

    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, p, lambda: False)() for p in probes)


LossKind = Literal["grpo", "sft"]


def _first_trained(s: TrainSample) -> int:
    """Index of the first token the loss weighs: a shared prefix must stop there."""
    return next((j for j, w in enumerate(s.token_weights) if w > 0), s.num_tokens)


class CPUTrainer:
    """AdamW on ``model`` (the back-end's module by default); one :meth:`step` per batch."""

    def __init__(self, model: Any, config: CPUTrainerConfig | None = None, *, pad_id: int = 0):
        import torch

        self.model = model
        self.config = config or CPUTrainerConfig()
        self.pad_id = pad_id
        if self.config.threads:
            torch.set_num_threads(self.config.threads)
        torch.manual_seed(self.config.seed)
        if self.config.lora is not None:
            from . import lora

            lora.attach(model, self.config.lora)  # before the seed's other draws: the adapter's init is seeded
        self._trainable = self._select_trainable()
        self._apply_trainable()
        self.params = [p for p in model.parameters() if id(p) in self._trainable]
        self.optimizer = torch.optim.AdamW(self.params, lr=self.config.lr, betas=self.config.betas,
                                           weight_decay=self.config.weight_decay)
        self.step_count = 0
        self.ref_model: Any = None  # the KL reference, frozen; set at the first GRPO step

    def _select_trainable(self) -> set[int]:
        if self.config.lora is not None:
            from .lora import adapter_params

            return {id(p) for p in adapter_params(self.model)}
        n = self.config.trainable_layers
        if n is None:
            return {id(p) for p in self.model.parameters()}
        decoder = self.model.get_decoder() if hasattr(self.model, "get_decoder") else None
        layers = getattr(decoder, "layers", None)
        if layers is None:
            from ..core.errors import ConfigError

            raise ConfigError("trainer.cpu.trainable_layers needs a decoder with .layers (llama-style model)")
        keep = [p for layer in list(layers)[-n:] for p in layer.parameters()]
        norm = getattr(decoder, "norm", None)
        if norm is not None:
            keep += list(norm.parameters())
        return {id(p) for p in keep}

    def _apply_trainable(self) -> None:
        """Another trainer may share the module (SFT warm-start, then GRPO): set our selection."""
        for p in self.model.parameters():
            p.requires_grad_(id(p) in self._trainable)

    # ---------------------------------------------------------------- batching
    def _shares_prefix(self) -> bool:
        model_type = getattr(getattr(self.model, "config", None), "model_type", None)
        return self.config.share_prefix and model_type in PREFIX_MODELS

    @contextlib.contextmanager
    def _checkpointing(self) -> Iterator[None]:
        """Per-layer activation checkpointing for the length of a step (``gradient_checkpointing``).

        HF's decoder layers checkpoint when their *own* ``training`` flag is set; only that flag is
        raised (not ``.train()`` on the tree), so dropout and every other submodule stay in eval mode
        and the logprobs stay exactly those the back-end records. The flag is lowered again after the
        step: the back-end generates with this very module."""
        from transformers.modeling_layers import GradientCheckpointingLayer

        layers = [m for m in self.model.modules() if isinstance(m, GradientCheckpointingLayer)] \
            if self.config.gradient_checkpointing else []
        if not layers:
            yield
            return
        if not getattr(self.model, "is_gradient_checkpointing", False):
            self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        flags = [m.training for m in layers]
        try:
            for m in layers:
                m.training = True
            yield
        finally:
            for m, f in zip(layers, flags):
                m.training = f

    @contextlib.contextmanager
    def _lora_dropout(self) -> Iterator[None]:
        """The adapter's dropout (``lora.dropout`` > 0) for the length of a step; sampling never drops."""
        lcfg = self.config.lora
        mods = [m for n, m in self.model.named_modules() if lcfg is not None and lcfg.dropout > 0
                and n.rsplit(".", 2)[-2:-1] == ["lora_dropout"]]
        try:
            for m in mods:
                m.training = True
            yield
        finally:
            for m in mods:
                m.training = False

    def _tensors(self, batch: Sequence[TrainSample], share: bool = False) -> dict[str, Any]:
        import torch

        T = max(s.num_tokens for s in batch)
        B = len(batch)
        ids = torch.full((B, T), self.pad_id, dtype=torch.long)
        attn = torch.zeros((B, T), dtype=torch.long)
        old = torch.zeros((B, T - 1))
        w = torch.zeros((B, T - 1))
        for i, s in enumerate(batch):
            n = s.num_tokens
            ids[i, :n] = torch.tensor(s.input_ids)
            attn[i, :n] = 1
            # position j of the targets predicts token j+1
            old[i, : n - 1] = torch.tensor(s.old_logprobs[1:])
            w[i, : n - 1] = torch.tensor(s.token_weights[1:], dtype=torch.float32)
        adv = torch.tensor([s.advantage for s in batch])
        prefix = shared_prefix([s.input_ids for s in batch], [_first_trained(s) for s in batch]) if share else 0
        return {"ids": ids, "attn": attn, "old": old, "w": w, "adv": adv, "prefix": prefix}

    # ---------------------------------------------------------------- KL reference
    def set_reference(self) -> None:
        """Freeze a copy of the current weights as the KL reference policy."""
        import copy

        ref = copy.deepcopy(self.model)
        ref.eval()
        for p in ref.parameters():
            p.requires_grad_(False)
        self.ref_model = ref

    def _ref_logprobs(self, tensors: list[dict[str, Any]]) -> list[Any]:
        """Reference logprobs of every micro-batch, once per step."""
        import torch

        with torch.no_grad():
            return [token_logprobs(self.ref_model, t["ids"], t["attn"], temperature=self.config.temperature,
                                   chunk=self.config.logprob_chunk, positions=t["w"] > 0, prefix=t["prefix"])
                    for t in tensors]

    # ---------------------------------------------------------------- steps
    def step(self, samples: Sequence[TrainSample], *, kind: LossKind = "grpo",
             progress: Callable[[int, int], None] | None = None,
             stop: threading.Event | None = None) -> dict[str, float]:
        """One optimizer step (``ppo_epochs`` of them for GRPO) over ``samples``; returns metrics.

        ``stop`` set (Ctrl-C, :func:`~openforge.train.stop.run_stoppable`) raises
        :class:`~openforge.core.errors.TrainingStopped` before the next micro-batch; the gradient gathered so
        far in that epoch is dropped, so the weights hold only whole optimizer steps."""
        import torch

        if not samples:
            return {"skipped": 1.0, "trained_tokens": 0.0}
        self._apply_trainable()
        cfg = self.config
        if cfg.trim_memory:
            release_memory()  # what the rollouts before freed (decode batches' keys/values) goes back first
        t0 = time.perf_counter()
        share = self._shares_prefix()
        batches = pack_microbatches([s.num_tokens for s in samples], cfg.micro_batch_tokens,
                                    seqs=[s.input_ids for s in samples] if share else None,
                                    limits=[_first_trained(s) for s in samples])
        tensors = [self._tensors([samples[i] for i in idx], share) for idx in batches]
        refs: list[Any] = [None] * len(batches)
        if kind == "grpo" and cfg.kl_coef > 0:
            if self.ref_model is None:
                self.set_reference()  # the policy GRPO starts from
            refs = self._ref_logprobs(tensors)
        epochs = cfg.ppo_epochs if kind == "grpo" else 1
        agg: dict[str, float] = {}
        gap_sum, gap_n, loss_sum, nlp_sum = 0.0, 0, 0.0, 0.0
        grad_norm = 0.0
        last_logp: Any = None  # the last micro-batch's logprobs before the update: diag's kl_step
        with self._checkpointing(), self._lora_dropout():
            for epoch in range(epochs):
                self.optimizer.zero_grad(set_to_none=True)
                for bi, (idx, t, ref) in enumerate(zip(batches, tensors, refs)):
                    if stop is not None and stop.is_set():
                        self.optimizer.zero_grad(set_to_none=True)
                        raise TrainingStopped(f"{kind} step {self.step_count + 1}: stopped on request")
                    amp = (torch.autocast("cpu", dtype=torch.bfloat16) if cfg.autocast_bf16
                           else contextlib.nullcontext())
                    with amp:
                        logp = token_logprobs(self.model, t["ids"], t["attn"], temperature=cfg.temperature,
                                              chunk=cfg.logprob_chunk, positions=t["w"] > 0, prefix=t["prefix"])
                    mask = t["w"] > 0
                    if kind == "grpo":
                        loss, m = policy_loss(logp, t["old"], t["adv"], t["w"], clip_low=cfg.clip_low,
                                              clip_high=cfg.clip_high, clip_ratio_c=cfg.clip_ratio_c,
                                              log_ratio_clamp=cfg.log_ratio_clamp, ref_logprobs=ref,
                                              kl_coef=cfg.kl_coef)
                        if epoch == 0:
                            gap_sum += float(((logp.detach() - t["old"]).abs() * mask).sum())
                            gap_n += int(mask.sum())
                            nlp_sum += float((-logp.detach() * mask).sum())
                            if bi == len(batches) - 1:
                                last_logp = logp.detach()
                        for k, v in m.items():
                            agg[k] = agg.get(k, 0.0) + v * len(idx)
                    else:
                        loss = -(t["w"] * logp).sum()
                    loss.backward()
                    loss_sum += float(loss.detach())
                    del loss, logp
                    if cfg.trim_memory:
                        trim_heap()  # this micro-batch's activations are free: their pages go back
                    if progress:
                        progress(epoch * len(batches) + bi + 1, epochs * len(batches))
                grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, cfg.grad_clip))
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)  # no gradient outlives its step (a model's worth)
                self.step_count += 1
        dt = time.perf_counter() - t0
        tokens = sum(s.num_tokens for s in samples) * epochs
        out = {
            "loss": loss_sum / epochs,
            "grad_norm": grad_norm,
            "segments": float(len(samples)),
            "micro_batches": float(len(batches)),
            "tokens": float(tokens),
            "trained_tokens": float(sum(s.num_trained_tokens for s in samples)),
            "train_time_s": dt,
            "train_tokens_per_s": tokens / dt if dt > 0 else 0.0,
        }
        if kind == "grpo":
            out.update({k: v / (len(samples) * epochs) for k, v in agg.items()})
            out["behaviour_logprob_gap"] = gap_sum / max(gap_n, 1)
            out["entropy_est"] = nlp_sum / max(gap_n, 1)
            out["kl_step"] = self._kl_step(tensors[-1], last_logp)
        return out

    def _kl_step(self, t: dict[str, Any], before: Any) -> float:
        """How far this step moved the policy: the k3 estimate of KL(before ‖ after) on the trained tokens
        of the step's last micro-batch (``before``: its logprobs in the first epoch, before any update; one
        extra forward of that micro-batch, without gradients). Metric only: the weights are not touched."""
        import torch

        cfg = self.config
        amp = torch.autocast("cpu", dtype=torch.bfloat16) if cfg.autocast_bf16 else contextlib.nullcontext()
        with torch.no_grad(), amp:
            after = token_logprobs(self.model, t["ids"], t["attn"], temperature=cfg.temperature,
                                   chunk=cfg.logprob_chunk, positions=t["w"] > 0, prefix=t["prefix"])
        mask = t["w"] > 0
        d = torch.clamp((after.float() - before.float()).masked_fill(~mask, 0.0), -20.0, 20.0)
        k3 = torch.exp(d) - d - 1.0
        return float((k3 * mask).sum() / mask.sum().clamp(min=1))

    def release_optimizer_state(self) -> None:
        """Drop AdamW's moments (twice the trainable weights' size) when no step follows, e.g. for a run's
        final held-out point once its last checkpoint holds them; a later :meth:`step` starts them afresh."""
        self.optimizer.state.clear()
        release_memory()

    # ---------------------------------------------------------------- weights
    async def publish(self, backend: WeightServer) -> None:
        """Make the back-end serve the new weights (no-op when it serves this very module)."""
        if backend.model is self.model:
            return
        await backend.swap_weights({k: v.detach() for k, v in self.model.state_dict().items()})

    def save(self, path: str | Path, extra: dict[str, Any] | None = None) -> Path:
        """Write weights (HF ``save_pretrained``; with LoRA the adapter alone), optimizer state (unless
        ``save_optimizer_state`` is off) and step count to ``path``."""
        import torch

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        if self.config.lora is not None:
            from .lora import save_adapter

            save_adapter(self.model, path)
        else:
            self.model.save_pretrained(path)
        if self.config.save_optimizer_state:
            torch.save({"optimizer": self.optimizer.state_dict(), "step": self.step_count}, path / "trainer_state.pt")
        if self.ref_model is not None:
            self._save_reference(path / REFERENCE_FILE)
        (path / "trainer.json").write_text(json.dumps({"step": self.step_count, **(extra or {})}, indent=2))
        return path

    def _save_reference(self, file: Path) -> None:
        if self.config.lora is not None:  # the base is the run's starting model: the adapter is the reference
            from safetensors.torch import save_file

            from .lora import adapter_state

            save_file(adapter_state(self.ref_model), str(file))
            return
        from safetensors.torch import save_model

        save_model(self.ref_model, str(file))  # handles tied embeddings

    def load(self, path: str | Path) -> dict[str, Any]:
        """Resume from :meth:`save`'s directory; returns its ``trainer.json`` (step + extras)."""
        import torch

        path = Path(path)
        if self.config.lora is not None:
            from .lora import load_adapter

            load_adapter(self.model, path)
        else:
            self._load_full(path)
        ref = path / REFERENCE_FILE
        self.ref_model = None  # without a saved reference: the loaded weights, at the next GRPO step
        if ref.is_file():
            self.set_reference()
            self._load_reference(ref)
        meta = json.loads((path / "trainer.json").read_text()) if (path / "trainer.json").is_file() else {}
        st = path / "trainer_state.pt"
        if st.is_file():
            blob = torch.load(st, weights_only=False)
            self.optimizer.load_state_dict(blob["optimizer"])
            self.step_count = int(blob["step"])
        elif "step" in meta and "trainer_state.pt" not in meta.get("resume_state", ["trainer_state.pt"]):
            # saved without optimizer state (save_optimizer_state=false): a fresh AdamW, the step count carries on
            self.step_count = int(meta["step"])
        return meta or {"step": self.step_count}

    def _load_full(self, path: Path) -> None:
        from safetensors.torch import load_file

        from ..core.errors import ConfigError

        files = sorted(f for f in path.glob("*.safetensors") if f.name != REFERENCE_FILE)
        from .lora import is_adapter_dir

        if is_adapter_dir(path):
            raise ConfigError(f"checkpoint {path} holds a LoRA adapter but trainer.cpu.lora is not set: resume "
                              "with the run's trainer.cpu.lora settings, or use a new run_dir")
        if not files:
            raise ConfigError(f"no checkpoint weights (*.safetensors) in {path}")
        state: dict[str, Any] = {}
        for f in files:
            state.update(load_file(str(f)))
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        bad = [k for k in missing if "lm_head" not in k]  # tied embeddings are not saved twice
        if bad or unexpected:
            raise ConfigError(f"checkpoint {path} does not fit the model: missing {bad[:3]}, unexpected {unexpected[:3]}")
        if hasattr(self.model, "tie_weights"):
            self.model.tie_weights()

    def _load_reference(self, file: Path) -> None:
        if self.config.lora is not None:
            from safetensors.torch import load_file

            from ..core.errors import ConfigError

            state = load_file(str(file))
            missing, unexpected = self.ref_model.load_state_dict(state, strict=False)
            lost = [k for k in missing if "lora_" in k]
            if lost or unexpected:
                raise ConfigError(f"{file}: the KL reference's adapter does not fit trainer.cpu.lora: missing "
                                  f"{lost[:3]}, unexpected {unexpected[:3]}")
            return
        from safetensors.torch import load_model

        load_model(self.ref_model, str(file))
