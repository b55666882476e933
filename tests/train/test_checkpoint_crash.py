"""Checkpoints are committed, then cleaned: the run is killed between each phase of a save (while the new
checkpoint is written, after it is renamed into place, after the manifest names it, in the middle of
cleaning the older ones) and a fresh process resumes with the full state — the weights of the step the
manifest names, the optimizer state, the KL reference and the right step count. A resume that finds
its checkpoint without the optimizer state or KL reference it was written with refuses, naming the file,
unless told to start them fresh.

Real pieces: the CPU trainer on tiny random llamas (real AdamW steps, a real KL reference), SmolLM2's
tokenizer, the real filesystem; the crash is an exception raised from inside ``os.replace`` /
``Path.unlink`` / ``shutil.rmtree`` right after the operation, so nothing after it runs."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import shutil

import pytest

from openforge.config import load_config
from openforge.core.errors import ForgeError

from .test_checkpoint import _sample

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

KL = 0.1
PHASES = ("writing", "written", "committed", "cleaning")


class Crash(BaseException):
    """The process dies here (a BaseException: no ``except Exception`` runs after it)."""


def fresh_llama(seed: int = 0):
    """A tiny random llama, as the ``tiny_llama`` fixture builds it (a new process gets a new one)."""
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(
        vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=True, eos_token_id=1)
    model = transformers.LlamaForCausalLM(cfg)
    model.eval()
    return model


@contextlib.contextmanager
def crash_at(monkeypatch, phase: str, step: int):
    """Kill the run at ``phase`` of the save of ``step-{step}``: ``writing`` (the model files of the new
    checkpoint half written), ``written`` (just after it is renamed to ``step-N``), ``committed`` (just
    after ``index.json`` is replaced, once ``step-N`` exists), ``cleaning`` (just after the first
    deletion in an older checkpoint: a resume-only file, or the whole directory)."""
    import openforge.train.checkpoint as ckmod

    name = f"step-{step}"
    real_replace, real_unlink, real_rmtree = os.replace, pathlib.Path.unlink, shutil.rmtree
    real_write = ckmod.write_model_files

    def older(p) -> bool:  # an older checkpoint, or a file in one
        parts = pathlib.Path(p).parts
        return any(x.startswith("step-") and x != name for x in parts[-2:])

    def replace(src, dst, *a, **k):
        real_replace(src, dst, *a, **k)
        d = pathlib.Path(dst)
        if phase == "written" and d.name == name:
            raise Crash(phase)
        if phase == "committed" and d.name == "index.json" and (d.parent / name).is_dir():
            raise Crash(phase)
        if phase == "cleaning" and older(src) and (d.parent / name).is_dir():
            raise Crash(phase)  # an older checkpoint renamed away to be deleted

    def unlink(self, *a, **k):
        existed = self.exists()
        real_unlink(self, *a, **k)
        if phase == "cleaning" and existed and older(self) and (self.parent.parent / name).is_dir():
            raise Crash(phase)

    def rmtree(path, *a, **k):
        real_rmtree(path, *a, **k)
        if phase == "cleaning" and older(path) and (pathlib.Path(path).parent / name).is_dir():
            raise Crash(phase)

    def write_model_files(path, **kw):
        if phase == "writing" and name in pathlib.Path(path).name:
            (path / "tokenizer.json").write_text("{")  # half written
            raise Crash(phase)
        return real_write(path, **kw)

    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(pathlib.Path, "unlink", unlink)
    monkeypatch.setattr(shutil, "rmtree", rmtree)
    monkeypatch.setattr(ckmod, "write_model_files", write_model_files)
    try:
        yield
    finally:
        monkeypatch.undo()


@pytest.fixture
def run(tmp_path, tokenizer):
    """``build(model, **trainer)``: a process's (Checkpoints, CPUTrainer) over one run directory."""
    from openforge.proxy.render import hermes_template
    from openforge.train.checkpoint import Checkpoints
    from openforge.train.cpu import CPUTrainer, CPUTrainerConfig

    def build(model, **trainer):
        cfg = load_config({"recipe": "crash-test", "model": {"name": "smollm2-135m"},
                           "trainer": {"steps": 6, **trainer, "cpu": {"kl_coef": KL}}})
        tr = CPUTrainer(model, CPUTrainerConfig(lr=1e-2, kl_coef=KL))
        return Checkpoints(tmp_path / "run", cfg, trainer=tr, tokenizer=tokenizer, template=hermes_template(),
                           parser="hermes"), tr
    return build


def _state(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _same(a, b) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _train_steps(ck, tr, steps, weights):
    for s in steps:
        tr.step([_sample()])  # one AdamW step (a KL reference from the first)
        weights[s] = _state(tr.model)
        ck.after_step(s, {"reward_mean": 0.1 * s, "rollouts": 4, "gradient_step": True}, due=True,
                      cursor={"epoch": 0, "position": s, "drawn": s, "deferred": [], "tasks": ""})


@pytest.mark.parametrize("keep", [1, 2])
@pytest.mark.parametrize("phase", PHASES)
def test_a_crash_between_the_phases_of_a_save_resumes_with_full_state(run, monkeypatch, phase, keep):
    model = fresh_llama(0)
    initial = _state(model)
    ck, tr = run(model, keep_checkpoints=keep, keep_best=False)
    weights: dict[int, dict] = {}
    _train_steps(ck, tr, [1, 2, 3], weights)
    with crash_at(monkeypatch, phase, 4), pytest.raises(Crash):
        _train_steps(ck, tr, [4], weights)

    # a new process, a new model: resume
    again, tr2 = run(fresh_llama(1), keep_checkpoints=keep, keep_best=False)
    path, done = again.resume_point()
    committed = phase in ("committed", "cleaning")
    assert done == (4 if committed else 3) and path.name == f"step-{done}"
    info = tr2.load(path)
    assert info["grpo_step"] == done
    assert tr2.step_count == done  # the optimizer steps that produced these weights, not a fresh count
    assert tr2.optimizer.state_dict()["state"], "optimizer state (AdamW moments) restored"
    assert tr2.ref_model is not None and _same(_state(tr2.ref_model), initial), "the run's KL reference"
    assert _same(_state(tr2.model), weights[done])
    assert again.cursor_state()["position"] == done  # the task cursor of that step
    # nothing uncommitted or half-deleted is left to be mistaken for a checkpoint later
    left = sorted(p.name for p in again.dir.iterdir())
    assert not [n for n in left if n.endswith((".tmp", ".trash"))], left
    assert all(int(p.name.split("-")[1]) <= done for p in again.saved()), left
    if not committed:
        assert any("never committed" in n for n in again.notes) == (phase == "written")
    # and the run goes on: the redone / next steps commit and clean as usual
    again.resumed()
    _train_steps(again, tr2, list(range(done + 1, 7)), weights)
    index = json.loads((again.dir / "index.json").read_text())
    assert [e["step"] for e in index["steps"]] == [1, 2, 3, 4, 5, 6] and index["latest"] == "step-6"
    assert [p.name for p in again.saved()] == [f"step-{s}" for s in range(7 - keep, 7)] == index["kept"]
    assert tr2.step_count == 6


def test_a_crash_before_the_first_commit_redoes_the_first_step(run, monkeypatch):
    """Nothing committed yet: the step-1 on disk is not adopted (its manifest entry and task cursor
    were never recorded); the run starts over from its starting model."""
    ck, tr = run(fresh_llama(0), keep_checkpoints=2)
    with crash_at(monkeypatch, "written", 1), pytest.raises(Crash):
        _train_steps(ck, tr, [1], {})
    assert (ck.dir / "step-1").is_dir()
    again, _ = run(fresh_llama(1), keep_checkpoints=2)
    assert again.resume_point() == (None, 0)
    assert not (again.dir / "step-1").exists() and any("never committed" in n for n in again.notes)


@pytest.mark.parametrize("lost", ["trainer_state.pt", "reference.safetensors"])
def test_a_checkpoint_without_its_resume_state_is_refused_naming_the_file(run, lost):
    ck, tr = run(fresh_llama(0), keep_checkpoints=2)
    _train_steps(ck, tr, [1, 2], {})
    (ck.dir / "step-2" / lost).unlink()
    again, _ = run(fresh_llama(1), keep_checkpoints=2)
    what = "optimizer state" if lost == "trainer_state.pt" else "KL reference"
    with pytest.raises(ForgeError, match=rf"step-2: {lost} \({what}\) is missing.*resume_missing_state=fresh"):
        again.resume_point()
    assert (ck.dir / "step-2").is_dir() and (ck.dir / "step-1").is_dir()  # a refusal removes nothing

    # the explicit opt-in: resumes, and says what starts fresh
    fresh, tr3 = run(fresh_llama(1), keep_checkpoints=2, resume_missing_state="fresh")
    path, done = fresh.resume_point()
    assert (path.name, done) == ("step-2", 2)
    assert any(lost in n and "resume_missing_state=fresh" in n for n in fresh.notes), fresh.notes
    tr3.load(path)
    if lost == "trainer_state.pt":
        assert tr3.step_count == 0 and not tr3.optimizer.state_dict()["state"]
    else:
        assert tr3.ref_model is None  # the loaded weights become the reference at the next step


def test_an_older_checkpoint_is_not_resumed_from_without_its_state(run):
    """Only the latest checkpoint keeps what resuming needs; with the latest gone (deleted by hand), the
    one before it is refused rather than resumed with a fresh optimizer and the wrong KL reference."""
    ck, tr = run(fresh_llama(0), keep_checkpoints=3)
    _train_steps(ck, tr, [1, 2, 3], {})
    assert not (ck.dir / "step-2" / "trainer_state.pt").exists()
    shutil.rmtree(ck.dir / "step-3")
    again, _ = run(fresh_llama(1), keep_checkpoints=3)
    with pytest.raises(ForgeError, match=r"step-2: trainer_state\.pt \(optimizer state\), reference\.safetensors"):
        again.resume_point()
