"""``forge export sft``: successful trajectories as SFT data (chat or token format, JSONL or Parquet);
``forge export atif``: trajectories as ATIF-v1.7 documents (:mod:`openforge.atif`), and ``--from`` an ATIF
folder for ``forge export sft``;
``forge export model``: a run's checkpoint as a Hugging Face model with a model card
(:mod:`openforge.train.export_model`).

Owns the ``export`` command group. Trajectories come from a directory (a training run or a ``forge
eval`` output), a file (a run's ``trajectories.db``, a ``trajectory.json``, or a JSONL/Parquet export)
or are produced on the spot by a teacher back-end run k times per task through a harness (``--teacher reference`` replays the tasks' reference
solutions as a scripted policy through the real proxy). ``--format tokens`` re-renders the
trajectories of an inexact (``openai:``) teacher with ``--model``'s chat template; an export that
writes no row says why and exits 1.

Held-out data is refused unless ``--allow-heldout`` asks for it: training on the tasks a run holds out
leaks them into the model, and its held-out numbers stop measuring anything. Held-out is recognised by
the source (a ``heldout`` folder in the ``--from`` path, a held-out point's ``heldout.json``; a teacher
run on ``--split heldout``) and by the trajectories themselves, wherever they were copied: the split
their task was in (``metadata.split``) and the held-out point that recorded them (``metadata.heldout``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from ..core.trajectory import Trajectory

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Export training data (sft), trajectories as ATIF (atif) or a trained model (model).",
                        no_args_is_help=True)
    app.add_typer(group, name="export")
    _register_model(group)
    _register_atif(group)

    @group.command("sft")
    def sft(
        out: Path = typer.Argument(..., help="Output file: .jsonl or .parquet"),
        source: Path = typer.Option(None, "--from", help="a run or forge eval directory, or a trajectories.db / "
                                    ".json / .jsonl / .parquet file to read"),
        env: str = typer.Option("claw", "--env", help="Environment (when running a teacher)"),
        split: str = typer.Option("train", "--split"),
        subset: str = typer.Option(None, "--subset", help="e.g. easy"),
        teacher: str = typer.Option("reference", "--teacher", help="reference | openai:URL | transformers:PATH | ..."),
        k: int = typer.Option(1, "--k", min=1, help="Teacher rollouts per task"),
        harness: str = typer.Option("react", "--harness"),
        fmt: str = typer.Option("chat", "--format", help="chat (messages + tools) | tokens (input_ids + loss_mask)"),
        min_reward: float = typer.Option(1.0, "--min-reward", help="Keep trajectories with at least this reward"),
        max_tasks: int = typer.Option(None, "--max-tasks", min=1),
        run_dir: Path = typer.Option(None, "--run-dir", help="Where teacher rollouts are recorded"),
        model: str = typer.Option("smollm2-135m", "--model",
                                  help="Policy whose chat template re-renders inexact teacher calls (--format tokens)"),
        allow_heldout: bool = typer.Option(False, "--allow-heldout",
                                           help="export held-out tasks' rollouts too (refused by default: training "
                                           "on them leaks the held-out set)"),
    ) -> None:
        """Export SFT data from recorded trajectories or fresh teacher rollouts."""
        from ..train.sft import export_sft
        from ..util.console import new_console

        console = new_console(stderr=True)
        if source is not None:
            trajs = _read_source(source)
            if not allow_heldout:
                _refuse_heldout(f"--from {source}", _heldout_path(source), trajs)
        else:
            import asyncio

            if split == "heldout" and not allow_heldout:
                _refuse_heldout("--split heldout", "the teacher would run on the held-out tasks", [])
            trajs = asyncio.run(_teacher(env, split, subset, teacher, k, harness, max_tasks, run_dir))
        renderer = None
        if fmt == "tokens" and any(not c.exact for t in trajs for c in t.calls):
            from ..proxy.backends.transformers import load_tokenizer
            from ..train.sft import policy_renderer

            renderer = policy_renderer(load_tokenizer(model))
        res = export_sft(trajs, out, fmt=fmt, min_reward=min_reward, renderer=renderer)
        _atif_notes(console, trajs, fmt, model)
        note = f", {res['rendered']} re-rendered with {model}'s chat template" if res["rendered"] else ""
        console.print(f"wrote {res['rows']} {fmt} rows from {res['trajectories']} successful trajectories "
                      f"(of {len(trajs)}){note} to {out}")
        if not res["rows"]:
            why = (f"no trajectory has reward >= {min_reward} and a trainable status" if not res["trajectories"]
                   else "the successful trajectories hold no chat-API call / generated token to export")
            console.print(f"[red]error:[/] no {fmt} row written: {why}")
            raise typer.Exit(1)


def _read_source(source: Path) -> list:
    """The trajectories of ``--from``: a file, or a directory (a training run, a ``forge eval`` output)
    read like ``forge report`` / ``forge compare`` read it."""
    from ..core.errors import StoreError

    if _is_atif_source(source):
        from ..atif import read_atif

        return read_atif(source)
    if source.is_dir():
        from ..analysis.rundir import load_run

        trajs = load_run(source).trajectories
        if not trajs:
            raise StoreError(f"{source}: no trajectories in this directory (expected a training run directory with "
                             "trajectories.db or a forge eval directory with trajectories.jsonl)")
        return trajs
    if not source.exists():
        raise StoreError(f"{source}: no such file or directory")
    from ..store import load_trajectories

    return load_trajectories(source)


#: The files that make a directory an openforge run, eval or rollout output (read as such, even with an atif/ in it).
_RUN_FILES = ("trajectories.jsonl", "trajectories.db", "trajectories.parquet", "trajectory.json", "trajectories",
              "metrics.jsonl", "eval.json")


def _is_atif_source(source: Path) -> bool:
    """``--from`` names ATIF documents: a ``.json`` file that is one, or a directory that is no openforge
    output (:data:`_RUN_FILES`) and holds some."""
    from ..atif import iter_atif

    if source.is_file():
        return source.suffix == ".json" and next(iter_atif(source), None) is not None
    if not source.is_dir() or any((source / n).exists() for n in _RUN_FILES):
        return False
    return next(iter_atif(source), None) is not None


def _atif_notes(console: Console, trajs: list, fmt: str, model: str) -> None:
    """What an export from ATIF documents of another framework had to assume."""
    foreign = [t for t in trajs if "atif" in (t.metadata or {})]
    if not foreign:
        return
    no_ids = sum(1 for t in foreign if t.metadata["atif"]["token_ids"] != "recorded")
    no_reward = sum(1 for t in foreign if t.metadata["atif"]["reward"] == "unknown")
    say = console.print
    if no_ids and fmt == "tokens":
        say(f"note: {no_ids} of {len(foreign)} ATIF trajectories carry no token ids: their tokens are re-tokenized "
            f"with {model}'s chat template (--model), not the ids the other framework's policy sampled")
    if no_reward:
        say(f"note: {no_reward} of {len(foreign)} ATIF trajectories record no reward (no extra.reward, no Harbor "
            "verifier result beside them): they count as reward 0 (pass --min-reward 0 to export them)")


def _heldout_path(source: Path) -> str | None:
    """Why ``source``'s location says held-out (a ``heldout`` folder in its path, a held-out point's
    ``heldout.json``), or None."""
    if "heldout" in source.resolve().parts:
        return "its path has a heldout/ folder"
    if source.is_dir() and (source / "heldout.json").is_file():
        return "it is a held-out point (heldout.json)"
    return None


def _is_heldout(traj: Trajectory) -> bool:
    """Recorded on a held-out task: its split, or the held-out point that rolled it out."""
    md = traj.metadata or {}
    return md.get("split") == "heldout" or bool(md.get("heldout"))


def _refuse_heldout(what: str, where: str | None, trajs: list[Trajectory]) -> None:
    """A :class:`ConfigError` naming ``--allow-heldout`` when ``where`` (the source) or any trajectory says held-out."""
    from ..core.errors import ConfigError

    marked = sum(1 for t in trajs if _is_heldout(t))
    why = [w for w in (where, f"{marked} of {len(trajs)} trajectories were recorded on held-out tasks "
                       "(metadata split/heldout)" if marked else None) if w]
    if why:
        raise ConfigError(f"{what}: held-out data ({'; '.join(why)}). Training on it leaks the held-out tasks into "
                          "the model and its held-out numbers stop measuring anything; pass --allow-heldout to "
                          "export it anyway")


def _register_model(group: typer.Typer) -> None:
    @group.command("model")
    def model(
        run_dir: Path = typer.Argument(..., help="a run directory (or one of its checkpoints/step-N)"),
        out: Path = typer.Option(..., "--out", "-o", help="new directory for the Hugging Face model"),
        step: int = typer.Option(None, "--step", min=0, help="the weights after this GRPO step (default: the last)"),
        best: bool = typer.Option(False, "--best", help="the kept checkpoint with the best mean reward"),
    ) -> None:
        """Export a checkpoint as a Hugging Face model with a model card (veRL runs: merged from shards)."""
        from ..train.export_model import export_model
        from ..train.model_card import vllm_flags

        res = export_model(run_dir, out, step=step, best=best)
        from ..util.modeldir import read_meta

        meta = read_meta(res.out)
        added = f" (added from the base model: {', '.join(res.completed)})" if res.completed else ""
        typer.echo(f"exported {res.source} (step {res.step}) to {res.out}{added}")
        if res.command:
            typer.echo(f"merged with: {' '.join(res.command)}")
        typer.echo(f"serve: vllm serve {res.out} {vllm_flags(meta.tool_call_parser if meta else 'hermes')}")


def _register_atif(group: typer.Typer) -> None:
    @group.command("atif")
    def atif(
        source: Path = typer.Argument(..., help="a run or forge eval directory, or a trajectories.db / .json / .jsonl "
                                      "/ .parquet file"),
        out: Path = typer.Option(None, "--out", "-o", help="folder for the ATIF documents (default: SOURCE/atif, "
                                 "or atif/ beside a file)"),
    ) -> None:
        """Write each trajectory as an ATIF-v1.7 document (Harbor's trajectory format), <rollout_id>.json."""
        from ..atif import ATIF_VERSION, write_atif

        if _is_atif_source(source):
            from ..core.errors import ConfigError

            raise ConfigError(f"{source}: these are ATIF documents already (export atif reads an openforge run, "
                              "a forge eval output or a trajectory file)")
        trajs = _read_source(source)
        dest = out or (source / "atif" if source.is_dir() else source.parent / "atif")
        paths = write_atif(trajs, dest)
        typer.echo(f"wrote {len(paths)} {ATIF_VERSION} trajectories to {dest}")


async def _teacher(env: str, split: str, subset: str | None, teacher: str, k: int, harness: str,
                   max_tasks: int | None, run_dir: Path | None) -> list:
    """Teacher rollouts through a session whose back-end is the teacher (no policy model loaded)."""
    from ..config import load_config
    from ..runner.teacher import export_teacher_rollouts

    ov = [f"env.name={env}", f"env.split={split}", f"harness.name={harness}", "trainer.steps=0"]
    if subset:
        ov.append(f"env.subset={subset}")
    if max_tasks:
        ov.append(f"env.max_tasks={max_tasks}")
    if run_dir:
        ov.append(f"run_dir={run_dir}")
    cfg = load_config({"recipe": "export-sft"}, overrides=ov)
    return await export_teacher_rollouts(cfg, teacher=teacher, k=k)
