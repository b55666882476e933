"""A run's checkpoints: complete model directories, which steps they hold, and which are kept.

Owns: :func:`write_model_files` (tokenizer, the exact chat template and ``openforge.json`` next to the
weights), :class:`Checkpoints` (saving, the ``checkpoints/index.json`` manifest, retention, the resume
point) (``RUN@last`` / ``@best`` / ``@N`` are resolved by :func:`openforge.modeldir.resolve_checkpoint`).

Each checkpoint ``checkpoints/step-N`` is a model ``transformers`` loads alone (weights, config,
tokenizer, ``chat_template.jinja``, ``openforge.json``), plus what resuming needs (``trainer.json``;
optimizer state and KL reference only in the latest one). It is written under a temporary name and
renamed, so a crash never leaves a half-written ``step-N``.

Only weights that changed are written: a step that ran no optimizer step (every group tied) writes no
checkpoint; the manifest records that the weights after step N are those of ``step-K``. The manifest
has one entry per GRPO step::

    {"step": N, "checkpoint": "step-K" | "initial" | null, "sampled_with": "step-J" | "initial" | null,
     "optimizer_step": bool, "gradient_step": bool, "reward_mean": r, "rollouts": n}

``checkpoint`` holds the weights *after* the step (``initial``: the run's starting model, unchanged;
null: changed but not saved, ``checkpoint_every`` > 1); ``sampled_with`` the weights that sampled
its rollouts. A checkpoint's score is the rollout-weighted mean reward of the steps it sampled, so
"best" ranks weights by rewards they earned, never by the reward of the policy before them.

Retention (``trainer.keep_checkpoints``, ``trainer.keep_best``): after each save the last N full
checkpoints are kept, plus the best-scored one; the others are deleted.
"""

from __future__ import annotations

import json
import os
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from ..modeldir import (
    BASE_MODEL_IDS,
    CHAT_TEMPLATE_FILE,
    INDEX_FILE,
    INITIAL,
    META_FILE,
    ModelMeta,
    read_meta,
    template_sha256,
)

__all__ = ["Checkpoints", "build_meta", "write_model_files"]

RESUME_ONLY = ("trainer_state.pt", "reference.safetensors")


class SavesCheckpoints(Protocol):
    """The trainer side of a checkpoint (:class:`~openforge.train.cpu.CPUTrainer`)."""

    step_count: int

    def save(self, path: str | Path, extra: dict[str, Any] | None = None) -> Path: ...


def write_model_files(path: Path, *, tokenizer: Any, template: str, meta: ModelMeta) -> None:
    """Tokenizer files, ``chat_template.jinja`` = ``template`` and ``openforge.json`` into ``path``."""
    tokenizer.save_pretrained(path)
    cfg_file = path / "tokenizer_config.json"
    cfg = json.loads(cfg_file.read_text())
    if cfg.pop("chat_template", None) is not None:  # one template, in its own file, wins everywhere
        cfg_file.write_text(json.dumps(cfg, indent=2, ensure_ascii=False))
    (path / CHAT_TEMPLATE_FILE).write_text(template)
    (path / META_FILE).write_text(meta.model_dump_json(indent=2))


def base_model_of(name: str) -> str:
    """The Hugging Face id (alias), the base of a model openforge trained (its ``openforge.json``), or ``name``."""
    if name.lower() in BASE_MODEL_IDS:
        return BASE_MODEL_IDS[name.lower()]
    p = Path(name).expanduser()
    meta = read_meta(p) if p.is_dir() else None
    return meta.base_model if meta is not None else name


def build_meta(cfg: Any, run_dir: Path, step: int, *, template: str, parser: str) -> ModelMeta:
    """``openforge.json`` of the weights after GRPO step ``step`` of the run ``cfg`` / ``run_dir``."""
    from .. import __version__

    return ModelMeta(
        run=run_dir.name, run_dir=str(run_dir), step=step, recipe=cfg.recipe, algorithm=cfg.algorithm,
        harnesses=harness_names(cfg.harness), environment=cfg.env.name, tool_call_parser=parser,
        base_model=base_model_of(cfg.model.name), init_model=cfg.model.name,
        chat_template_sha256=template_sha256(template), openforge_version=__version__,
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))


def harness_names(harness: Any) -> list[str]:
    """``harness.name`` of a config as a list (one name, a list, or a weighted mapping)."""
    name = getattr(harness, "name", harness)
    if isinstance(name, str):
        return [name]
    if isinstance(name, dict):
        return [str(k) for k in name]
    return [str(getattr(n, "name", n)) for n in name]


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


class Checkpoints:
    """The checkpoints of one run directory (see the module docstring)."""

    def __init__(self, run_dir: str | Path, cfg: Any, *, trainer: SavesCheckpoints, tokenizer: Any,
                 template: str, parser: str):
        self.run_dir = Path(run_dir)
        self.dir = self.run_dir / "checkpoints"
        self.cfg, self.trainer, self.tokenizer, self.template, self.parser = cfg, trainer, tokenizer, template, parser
        self.keep_last: int | None = getattr(cfg.trainer, "keep_checkpoints", None)
        self.keep_best: bool = bool(getattr(cfg.trainer, "keep_best", False))
        self.entries: list[dict[str, Any]] = []  # a resumed run reads them in resume_point()
        self.current: str | None = INITIAL  # the checkpoint that holds the live weights
        self._saved_count = trainer.step_count

    # -- manifest ------------------------------------------------------------------------------
    def _read_index(self) -> dict[str, Any]:
        f = self.dir / INDEX_FILE
        return json.loads(f.read_text()) if f.is_file() else {}

    def _write_index(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        best = self.best()
        data = {"steps": self.entries, "kept": [p.name for p in self.saved()], "latest": self.current,
                "best": best, "keep_checkpoints": self.keep_last, "keep_best": self.keep_best}
        tmp = self.dir / f".{INDEX_FILE}.tmp"
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, self.dir / INDEX_FILE)

    def saved(self) -> list[Path]:
        """Full checkpoints on disk, oldest first."""
        if not self.dir.is_dir():
            return []
        dirs = [p for p in self.dir.glob("step-*") if p.is_dir() and p.name.split("-", 1)[1].isdigit()]
        return sorted(dirs, key=lambda p: int(p.name.split("-", 1)[1]))

    # -- resume --------------------------------------------------------------------------------
    def resume_point(self) -> tuple[Path | None, int]:
        """``(checkpoint to load or None, GRPO steps already done)``; drops manifest entries past it."""
        on_disk = {p.name for p in self.saved() if (p / "trainer.json").is_file()}
        self.entries = self._read_index().get("steps", [])
        for i in range(len(self.entries) - 1, -1, -1):
            ck = self.entries[i].get("checkpoint")
            if ck == INITIAL or ck in on_disk:
                done = self.entries[i]["step"]
                self.entries = self.entries[: i + 1]
                self.current = ck
                return (None if ck == INITIAL else self.dir / ck), done
        self.entries = []
        if on_disk:  # a run directory from before the manifest: its newest step-N
            last = self.saved()[-1]
            meta = json.loads((last / "trainer.json").read_text())
            self.current = last.name
            return last, int(meta.get("grpo_step", 0))
        return None, 0

    def resumed(self) -> None:
        """The trainer just loaded :meth:`resume_point`'s weights: they are saved as they are."""
        self._saved_count = self.trainer.step_count

    def weights_changed_before_training(self) -> None:
        """The live weights differ from the starting model (an SFT warm-start ran)."""
        self.current = None

    # -- saving --------------------------------------------------------------------------------
    def after_step(self, step: int, line: dict[str, Any], *, due: bool) -> Path | None:
        """Record GRPO step ``step`` (its metrics ``line``); save when ``due`` and the weights changed."""
        stepped = self.trainer.step_count != self._saved_count
        entry = {"step": step, "sampled_with": self.current, "optimizer_step": stepped,
                 "gradient_step": bool(line.get("gradient_step", stepped)),
                 "reward_mean": line.get("reward_mean"), "rollouts": line.get("rollouts", 0)}
        if stepped:
            self.current = None
        path = None
        if due and self.current is None:
            path = self.save(step)
            if not stepped:  # the weights that sampled this step are the ones just saved
                entry["sampled_with"] = self.current
        entry["checkpoint"] = self.current
        self.entries = [e for e in self.entries if e["step"] < step] + [entry]
        self.prune()
        self._write_index()
        return path

    def save(self, step: int) -> Path:
        """Write the live weights as ``step-N`` (complete model + resume state), atomically."""
        self.dir.mkdir(parents=True, exist_ok=True)
        name = f"step-{step}"
        tmp = self.dir / f".{name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        self.trainer.save(tmp, extra={"grpo_step": step})
        write_model_files(tmp, tokenizer=self.tokenizer, template=self.template, meta=self.meta(step))
        final = self.dir / name
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        self.current, self._saved_count = name, self.trainer.step_count
        for older in self.saved():  # only the latest checkpoint is resumed from
            if older.name != name:
                for f in RESUME_ONLY:
                    (older / f).unlink(missing_ok=True)
        return final

    def meta(self, step: int) -> ModelMeta:
        return build_meta(self.cfg, self.run_dir, step, template=self.template, parser=self.parser)

    # -- retention -----------------------------------------------------------------------------
    def scores(self) -> dict[str, float]:
        """Rollout-weighted mean reward of the steps each checkpoint sampled."""
        tot: dict[str, list[float]] = {}
        for e in self.entries:
            ck, n, r = e.get("sampled_with"), e.get("rollouts") or 0, e.get("reward_mean")
            if ck and ck != INITIAL and n and r is not None:
                acc = tot.setdefault(ck, [0.0, 0.0])
                acc[0] += r * n
                acc[1] += n
        return {ck: s / n for ck, (s, n) in tot.items()}

    def best(self) -> str | None:
        """The best-scored checkpoint still on disk (ties: the later one)."""
        on_disk = {p.name for p in self.saved()}
        scored = [(s, int(ck.split("-")[1]), ck) for ck, s in self.scores().items() if ck in on_disk]
        return max(scored)[2] if scored else None

    def prune(self) -> list[str]:
        """Delete full checkpoints outside the last ``keep_last``, the best and the latest; their names."""
        saved = self.saved()
        if self.keep_last is None:
            return []
        keep = {p.name for p in saved[-self.keep_last:]} | {self.current}
        if self.keep_best:
            keep.add(self.best())
        gone = [p for p in saved if p.name not in keep]
        for p in gone:
            shutil.rmtree(p)
        return [p.name for p in gone]

    def size_bytes(self) -> int:
        return _du(self.dir) if self.dir.is_dir() else 0
