"""A run's checkpoints: complete model directories, which steps they hold, and which are kept.

Owns: :func:`write_model_files` (tokenizer, the exact chat template and ``openforge.json`` next to the
weights), :class:`Checkpoints` (saving, the ``checkpoints/index.json`` manifest, retention, the resume
point) (``RUN@last`` / ``@best`` / ``@N`` are resolved by :func:`openforge.util.modeldir.resolve_checkpoint`).

Each checkpoint ``checkpoints/step-N`` is a model ``transformers`` loads alone (weights, config,
tokenizer, ``chat_template.jinja``, ``openforge.json``) or, with ``trainer.cpu.lora``, a LoRA adapter
(``adapter_config.json`` naming the run's starting model as its base, ``adapter_model.safetensors``; see
:mod:`openforge.train.lora`) with the same tokenizer, template and metadata, plus what resuming needs (``trainer.json``,
which lists the resume-only files the trainer wrote: optimizer state and KL reference, kept only in the
latest one).

Commit, then clean. A save is three phases, each safe to die after:

1. write: the checkpoint is written under a temporary name, fsynced and renamed to ``step-N``
   (a crash never leaves a half-written ``step-N``; a ``step-N`` the manifest does not name is
   uncommitted, and a resumed run deletes it and redoes that step);
2. commit: ``index.json`` naming it is written to a temporary file, fsynced and atomically replaced
   (the manifest is the only record of what a resume may use);
3. clean: only then are the older checkpoints' resume-only files deleted and the checkpoints outside
   retention removed (each renamed away first, so none is ever half-deleted under its name).

So the checkpoint a resume picks (the manifest's latest one on disk) always has the state it was
written with. A resume that finds its checkpoint without the optimizer state or KL reference it was
saved with (deleted by hand, or by an older openforge that cleaned before committing) refuses with a
:class:`~openforge.core.errors.ForgeError` naming the file, unless ``trainer.resume_missing_state=fresh``
(then the log says what starts fresh).

Only weights that changed are written: a step that ran no optimizer step (every group tied) writes no
checkpoint; the manifest records that the weights after step N are those of ``step-K``. The manifest
has one entry per GRPO step::

    {"step": N, "checkpoint": "step-K" | "initial" | null, "sampled_with": "step-J" | "initial" | null,
     "optimizer_step": bool, "gradient_step": bool, "reward_mean": r, "rollouts": n}

``checkpoint`` holds the weights *after* the step (``initial``: the run's starting model, unchanged;
null: changed but not saved, ``checkpoint_every`` > 1); ``sampled_with`` the weights that sampled
its rollouts. A checkpoint's score is the rollout-weighted mean reward of the steps it sampled, so
"best" ranks weights by rewards they earned, never by the reward of the policy before them.

Each entry also carries the run's task cursor after that step (:mod:`openforge.runner.task_cursor`), so a
resumed run draws the tasks the interrupted one would have.

Retention (``trainer.keep_checkpoints``, ``trainer.keep_best``): after each save the last N full
checkpoints are kept, plus the best-scored one; the others are deleted (after the commit).
"""

from __future__ import annotations

import json
import os
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from ..core.errors import ForgeError
from ..util.atomicdir import fsync_path as _fsync
from ..util.atomicdir import publish_dir, staging_dir
from ..util.atomicdir import remove_dir as _remove_dir
from ..util.modeldir import (
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
RESUME_STATE_KEY = "resume_state"  # trainer.json: the resume-only files written with the checkpoint
_WHAT = {"trainer_state.pt": "optimizer state", "reference.safetensors": "KL reference"}


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


def _step_of(name: str) -> int:
    return int(name.split("-", 1)[1])


class Checkpoints:
    """The checkpoints of one run directory (see the module docstring)."""

    def __init__(self, run_dir: str | Path, cfg: Any, *, trainer: SavesCheckpoints, tokenizer: Any,
                 template: str, parser: str):
        self.run_dir = Path(run_dir)
        self.dir = self.run_dir / "checkpoints"
        self.cfg, self.trainer, self.tokenizer, self.template, self.parser = cfg, trainer, tokenizer, template, parser
        self.keep_last: int | None = getattr(cfg.trainer, "keep_checkpoints", None)
        self.keep_best: bool = bool(getattr(cfg.trainer, "keep_best", False))
        self.missing_state: str = getattr(cfg.trainer, "resume_missing_state", "refuse")
        self.entries: list[dict[str, Any]] = []  # a resumed run reads them in resume_point()
        self.current: str | None = INITIAL  # the checkpoint that holds the live weights
        self.notes: list[str] = []  # what resume_point() found and did, for the run's log
        self._saved_count = trainer.step_count

    # -- manifest ------------------------------------------------------------------------------
    def _read_index(self) -> dict[str, Any]:
        f = self.dir / INDEX_FILE
        return json.loads(f.read_text()) if f.is_file() else {}

    def _write_index(self, kept: list[str]) -> None:
        """Commit: the manifest naming ``self.current`` (fsynced, then atomically replaced)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        data = {"steps": self.entries, "kept": kept, "latest": self.current, "best": self.best(among=kept),
                "keep_checkpoints": self.keep_last, "keep_best": self.keep_best}
        tmp = self.dir / f".{INDEX_FILE}.tmp"
        with tmp.open("w") as f:
            f.write(json.dumps(data, indent=1))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.dir / INDEX_FILE)
        _fsync(self.dir)

    def saved(self) -> list[Path]:
        """Full checkpoints on disk, oldest first."""
        if not self.dir.is_dir():
            return []
        dirs = [p for p in self.dir.glob("step-*") if p.is_dir() and p.name.split("-", 1)[1].isdigit()]
        return sorted(dirs, key=lambda p: _step_of(p.name))

    def cursor_state(self) -> dict[str, Any] | None:
        """The task cursor saved with the last step :meth:`resume_point` kept (None: none saved)."""
        return self.entries[-1].get("cursor") if self.entries else None

    # -- resume --------------------------------------------------------------------------------
    def resume_point(self) -> tuple[Path | None, int]:
        """``(checkpoint to load or None, GRPO steps already done)``; drops manifest entries past it and
        removes checkpoints no committed step names past it. Raises :class:`~openforge.core.errors.ForgeError`
        when the checkpoint lacks resume state it was written with (see the module docstring)."""
        ck, done = self._find_resume_point()
        if ck is not None:
            self._check_state(ck)  # before anything is removed: a refusal leaves the directory as it was
        self._discard_uncommitted(done)
        return ck, done

    def _find_resume_point(self) -> tuple[Path | None, int]:
        """The manifest's latest step whose weights are on disk (or the starting model)."""
        on_disk = {p.name for p in self.saved() if (p / "trainer.json").is_file()}
        has_index = (self.dir / INDEX_FILE).is_file()
        index = self._read_index()
        entries = index.get("steps", [])
        for i in range(len(entries) - 1, -1, -1):
            ck = entries[i].get("checkpoint")
            if ck == INITIAL or ck in on_disk:
                self.entries, self.current = entries[: i + 1], ck
                return (None if ck == INITIAL else self.dir / ck), entries[i]["step"]
        latest = index.get("latest")
        if latest in on_disk:  # an SFT-only run: its step-0, no GRPO step
            return self._adopt(latest)
        named = sorted({e["checkpoint"] for e in entries if e.get("checkpoint") not in (None, INITIAL)})
        if on_disk and (named or not has_index):
            newest = max(on_disk, key=_step_of)
            if named:  # written by an openforge that cleaned before it committed
                self.notes.append(f"{INDEX_FILE} names checkpoints no longer on disk ({', '.join(named)}): "
                                  f"resuming from the newest one on disk, {newest}")
            return self._adopt(newest)  # (without a manifest: a run directory from before it)
        return None, 0  # nothing committed: a checkpoint on disk is a step to redo

    def _adopt(self, name: str) -> tuple[Path, int]:
        path = self.dir / name
        meta = json.loads((path / "trainer.json").read_text())
        self.entries, self.current = [], name
        return path, int(meta.get("grpo_step", 0))

    def _discard_uncommitted(self, done: int) -> None:
        """Remove what a crash left: temporary directories, and checkpoints of steps past ``done``
        (written, never committed to the manifest: their steps are redone)."""
        if not self.dir.is_dir():
            return
        for p in [*self.dir.glob(".step-*.tmp"), *self.dir.glob(".step-*.trash")]:
            shutil.rmtree(p, ignore_errors=True)
        for p in self.saved():
            if _step_of(p.name) > done:
                _remove_dir(p)
                self.notes.append(f"checkpoints/{p.name} was written but never committed to {INDEX_FILE} (the run "
                                  f"stopped before recording it): removed; its step is trained again")

    def _expected_state(self, ck: Path) -> list[str]:
        meta = json.loads((ck / "trainer.json").read_text())
        listed = meta.get(RESUME_STATE_KEY)
        if listed is not None:
            return [str(f) for f in listed]
        kl = getattr(getattr(self.cfg.trainer, "cpu", None), "kl_coef", 0.0) or 0.0  # before the list: guess
        return ["trainer_state.pt", *(["reference.safetensors"] if kl > 0 else [])]

    def _check_state(self, ck: Path) -> None:
        expected = self._expected_state(ck)
        if "trainer_state.pt" not in expected:  # the checkpoint lists what it was written with
            self.notes.append(f"resuming from {ck.name} with a fresh AdamW: it was saved without optimizer state "
                              "(trainer.cpu.save_optimizer_state=false)")
        missing = [f for f in expected if not (ck / f).is_file()]
        if not missing:
            return
        named = ", ".join(f"{f} ({_WHAT.get(f, 'resume state')})" for f in missing)
        fresh = "; ".join(
            ("a fresh AdamW" if f == "trainer_state.pt" else "the loaded weights become the KL reference")
            for f in missing)
        if self.missing_state == "fresh":
            self.notes.append(f"resuming from {ck.name} without {named} (trainer.resume_missing_state=fresh): {fresh}")
            return
        raise ForgeError(
            f"cannot resume from {ck}: {named} is missing, though it was written with this checkpoint. Resuming "
            f"without it would silently start over part of the training state ({fresh}). To continue from these "
            "weights anyway, run again with trainer.resume_missing_state=fresh; to start over, use a new run_dir "
            "(or trainer.resume=false)")

    def resumed(self) -> None:
        """The trainer just loaded :meth:`resume_point`'s weights: they are saved as they are."""
        self._saved_count = self.trainer.step_count

    def weights_changed_before_training(self) -> None:
        """The live weights differ from the starting model (an SFT warm-start ran)."""
        self.current = None

    # -- saving --------------------------------------------------------------------------------
    def after_step(self, step: int, line: dict[str, Any], *, due: bool,
                   cursor: dict[str, Any] | None = None) -> Path | None:
        """Record GRPO step ``step`` (its metrics ``line``, the task ``cursor`` after it); save when
        ``due`` and the weights changed. Write, commit, then clean (see the module docstring)."""
        stepped = self.trainer.step_count != self._saved_count
        entry: dict[str, Any] = {"step": step, "sampled_with": self.current, "optimizer_step": stepped,
                                 "gradient_step": bool(line.get("gradient_step", stepped)),
                                 "reward_mean": line.get("reward_mean"), "rollouts": line.get("rollouts", 0)}
        if stepped:
            self.current = None
        path = None
        if due and self.current is None:
            path = self._write(step)
            if not stepped:  # the weights that sampled this step are the ones just saved
                entry["sampled_with"] = self.current
        entry["checkpoint"] = self.current
        if cursor is not None:
            entry["cursor"] = cursor
        self.entries = [e for e in self.entries if e["step"] < step] + [entry]
        self._commit_then_clean()
        return path

    def save(self, step: int) -> Path:
        """Write the live weights as ``step-N`` (complete model + resume state), commit, then clean."""
        path = self._write(step)
        self._commit_then_clean()
        return path

    def _write(self, step: int) -> Path:
        """Phase 1: ``step-N`` written under a temporary name, fsynced, renamed (not yet committed)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        name = f"step-{step}"
        final = self.dir / name
        tmp = staging_dir(final)
        if not (self.dir / INDEX_FILE).is_file():  # so a step-N the manifest does not name is uncommitted
            self._write_index(self.retained(self._resume_checkpoint()))
        self.trainer.save(tmp, extra={"grpo_step": step})
        from .lora import is_adapter_dir, set_adapter_base

        if is_adapter_dir(tmp):  # a LoRA adapter: it names the model it applies to
            set_adapter_base(tmp, self.cfg.model.name)
        meta_file = tmp / "trainer.json"
        meta = json.loads(meta_file.read_text())
        meta[RESUME_STATE_KEY] = [f for f in RESUME_ONLY if (tmp / f).is_file()]
        meta_file.write_text(json.dumps(meta, indent=2))
        write_model_files(tmp, tokenizer=self.tokenizer, template=self.template, meta=self.meta(step))
        publish_dir(tmp, final, replace=True)  # a step-N left uncommitted by an earlier attempt is replaced
        self.current, self._saved_count = name, self.trainer.step_count
        return final

    def _commit_then_clean(self) -> None:
        """Phase 2, the manifest naming the new state; then phase 3, deleting what it no longer needs."""
        resume_from = self._resume_checkpoint()
        kept = self.retained(resume_from)
        self._write_index(kept)
        for p in self.saved():  # only the checkpoint a resume would load keeps what resuming needs
            if p.name != resume_from:
                for f in RESUME_ONLY:
                    (p / f).unlink(missing_ok=True)
        for p in self.saved():
            if p.name not in kept:
                _remove_dir(p)

    def _resume_checkpoint(self) -> str | None:
        """The checkpoint a resume would load now: the manifest's latest, or the one just saved."""
        for e in reversed(self.entries):
            if e.get("checkpoint") is not None:
                return e["checkpoint"]
        return self.current

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

    def best(self, among: list[str] | None = None) -> str | None:
        """The best-scored checkpoint on disk (or of ``among``) (ties: the later one)."""
        names = set(among) if among is not None else {p.name for p in self.saved()}
        scored = [(s, _step_of(ck), ck) for ck, s in self.scores().items() if ck in names]
        return max(scored)[2] if scored else None

    def retained(self, resume_from: str | None = None) -> list[str]:
        """The full checkpoints retention keeps, oldest first: the last ``keep_last``, the best, the
        latest and the one a resume would load (every one with ``keep_last`` null)."""
        saved = [p.name for p in self.saved()]
        if self.keep_last is None:
            return saved
        keep = set(saved[-self.keep_last:]) | {self.current, resume_from}
        if self.keep_best:
            keep.add(self.best())
        return [n for n in saved if n in keep]

    def size_bytes(self) -> int:
        return _du(self.dir) if self.dir.is_dir() else 0
