"""``forge eval``, ``forge compare``, ``forge report``: evaluate agents and understand runs.

Heavy imports (the proxy, back-ends, jinja2) stay inside the commands so ``forge --version``
stays instant. Definitions of every number: docs/metrics.md.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NoReturn

import typer

from ..core.errors import ConfigError
from ..util.console import new_console
from ._signals import run_main


def _eval_table(summary: Any) -> Any:
    from rich.table import Table

    from ..analysis.compare import fmt_value

    k = summary.k
    t = Table(title=f"forge eval · {summary.tasks} tasks × {k} trials")
    cols = ["category", "tasks", "pass@1", *([f"pass@{k}", f"pass^{k}"] if k > 1 else []), "mean reward", "failures"]
    for col in cols:
        t.add_column(col, justify="left" if col in ("category", "failures") else "right", overflow="fold")

    def failures(st: dict[str, int]) -> str:
        return " ".join(f"{s.replace('_failure', '').replace('_error', '')} {n}"
                        for s, n in sorted(st.items()) if s != "success") or "–"

    def row(name: str, tasks: int, p1: Any, pk: Any, phk: Any, mr: Any, st: dict[str, int], **kw: Any) -> None:
        passk = [fmt_value(pk, "pct"), fmt_value(phk, "pct")] if k > 1 else []
        t.add_row(name, str(tasks), fmt_value(p1, "pct"), *passk, fmt_value(mr, "float"), failures(st), **kw)

    for c in summary.categories:
        row(c.category, c.tasks, c.pass_at_1, c.pass_at_k, c.pass_hat_k, c.mean_reward, c.statuses)
    row("[bold]all[/]", summary.tasks, summary.pass_at_1, summary.pass_at_k, summary.pass_hat_k,
        summary.mean_reward, summary.statuses, style="bold")
    return t


def _status_line(statuses: dict[str, int]) -> str:
    return "  ".join(f"{k}={v}" for k, v in sorted(statuses.items(), key=lambda kv: -kv[1])) or "none"


def _eval_many(req: Any, backends: list[str], out: Path, as_json: bool) -> None:
    """``forge eval -b A -b B ...``: each back-end on the same tasks, then one side-by-side table."""
    from ..analysis.compare import compare_table
    from ..analysis.eval_many import comparison_rows
    from ..runner.evaluation import eval_backends

    results = run_main(eval_backends(req, backends, out, progress=not as_json))
    rows = comparison_rows(results, k=req.trials)
    if as_json:
        typer.echo(json.dumps([{"backend": label, "dir": str(d), "summary": s.model_dump(mode="json")}
                               for label, d, s in results], indent=1))
        return
    con = new_console()
    for label, _d, s in results:
        con.print(f"[bold]{label}[/]: {s.tasks} tasks × {s.k} trials · statuses {_status_line(s.statuses)}")
    con.print(compare_table(rows))
    con.print(f"wrote {out}/ (one forge eval directory per back-end) — forge compare {out}/*")
    _fail_if_no_backend_valid(results)


def _fail_if_no_backend_valid(results: list[Any]) -> None:
    """``forge eval -b A -b B``: name each back-end with no valid rollout (its first error); exit 3 when none had one."""
    from rich.markup import escape

    from ..runner.run_health import first_error
    from ..store import load_trajectories

    dead = [(label, d) for label, d, s in results if not s.valid_trials]
    err = new_console(stderr=True)
    for label, d in dead:
        failed = [t for t in load_trajectories(d / "trajectories.jsonl") if not t.trainable]
        first = escape(first_error(failed[0])) if failed else "no rollout ran"
        err.print(f"[yellow]{escape(label)}: no valid rollout[/]; first failed rollout: {first}")
    if dead and len(dead) == len(results):
        err.print("[bold red]error:[/] no back-end had a valid rollout, so nothing was scored")
        raise typer.Exit(3)


def _report_detokenizer(config: Any, given: str | None) -> Any:
    """``ids → text`` for ``forge report``: ``--tokenizer``, else the run's own (:mod:`openforge.analysis.
    report_tokenizer`), loaded with a progress message; ``None`` (raw ids) when none is known or the run's
    own cannot be loaded here (said on stderr). A ``--tokenizer`` that cannot be loaded is an error."""
    import time

    from rich.markup import escape

    from ..analysis.report_tokenizer import TokenizerChoice, run_tokenizer
    from ..proxy.light_tokenizer import load_light_tokenizer

    choice = TokenizerChoice(given, "--tokenizer") if given else run_tokenizer(config)
    err = new_console(stderr=True)
    if choice.name is None:
        err.print(escape(f"no tokenizer for this run ({choice.source}): the viewer shows token ids; give "
                         "--tokenizer NAME"))
        return None
    t = time.monotonic()
    err.print(escape(f"loading tokenizer {choice.name} ({choice.source}) to decode the token ids …"))
    try:
        tok = load_light_tokenizer(choice.name)
    except Exception as e:
        if given:
            raise ConfigError(f"cannot load tokenizer {given!r}: {e}") from None
        err.print(escape(f"cannot load the run's tokenizer {choice.name}: {e}; the viewer shows token ids "
                         "(give --tokenizer NAME)"), style="yellow")
        return None
    err.print(escape(f"tokenizer {choice.name} loaded in {time.monotonic() - t:.1f}s"))

    def detok(ids: Any) -> str:
        return tok.decode(list(ids), skip_special_tokens=False)

    return detok


def _fresh_store(out: Path) -> Path:
    """``OUT/rollouts.db``, where every attempt is recorded as it finishes (what Ctrl-C keeps); one left
    by an earlier eval into the same folder is removed first."""
    from ..runner.evaluation import ROLLOUTS_DB

    store = out / ROLLOUTS_DB
    for suffix in ("", "-wal", "-shm"):
        Path(f"{store}{suffix}").unlink(missing_ok=True)
    return store


def _interrupted(req: Any, out: Path, store: Path, as_json: bool, code: int) -> NoReturn:
    """Ctrl-C (exit 130) or SIGTERM (143): write the finished rollouts as a partial eval directory
    (``interrupted: true``), say so, exit ``code``."""
    from ..runner.evaluation import finished_trials, write_eval_dir

    summary, trajs = finished_trials(store, k=req.trials)
    write_eval_dir(out, req, summary, trajs, interrupted=True)
    err = new_console(stderr=True)
    if not as_json and trajs:
        err.print(_eval_table(summary))
    err.print(f"[yellow]interrupted[/]: {len(trajs)} finished rollout(s) kept (statuses "
              f"{_status_line(summary.statuses)}); the partial summary is in {out}/eval.json (marked "
              f"interrupted) — forge report {out}")
    raise typer.Exit(code)


def _fail_if_nothing_valid(summary: Any, trajs: list[Any], out: Path) -> None:
    """Print the first harness/verifier/infra error (with its traceback); exit 3 when no rollout was valid."""
    from rich.markup import escape

    from ..runner.run_health import first_error

    failed = [t for t in trajs if not t.trainable]
    if not failed:
        return
    err = new_console(stderr=True)
    err.print(f"first failed rollout: {escape(first_error(failed[0]))}")
    if not summary.valid_trials:
        err.print(f"[bold red]error:[/] no valid rollout: {len(failed)} of {len(trajs)} were not trainable "
                  f"({_status_line(summary.statuses)}), so nothing was scored; details in {out}/trajectories.jsonl")
        raise typer.Exit(3)


def register(app: typer.Typer) -> None:
    @app.command("eval")
    def eval_cmd(
        harness: list[str] = typer.Option(None, "--harness", "-H", help="harness name (forge harness list); "
                                          "several: repeat it or comma-separate (-H react -H pi)  [required]"),
        harness_old: list[str] = typer.Option(None, "-h", hidden=True, help="old spelling of -H"),
        env: str = typer.Option(..., "--env", "-e", help="environment name, module:Class, or a task directory"),
        backend: list[str] = typer.Option(..., "--backend", "-b", help="scripted:FILE | transformers:MODEL | vllm:URL | openai:URL | reference (replay the tasks' reference solutions) | RUN@last / @best / @N / @base (a run's checkpoint); repeat to compare back-ends in one table"),
        trials: int = typer.Option(3, "--trials", "-k", min=1, help="runs per task (k of pass@k / pass^k)"),
        split: str = typer.Option("eval", "--split", help="task split: eval, train or all"),
        task: list[str] = typer.Option([], "--task", help="only these task ids (repeatable)"),
        concurrency: int = typer.Option(2, "--concurrency", "-j", min=1, help="rollouts at once"),
        budget_s: float = typer.Option(None, "--budget-s", help="wall-clock budget per rollout (default: the task's)"),
        budget_old: float = typer.Option(None, "--budget", hidden=True, help="old spelling of --budget-s"),
        tokenizer: str = typer.Option(None, "--tokenizer", help="tokenizer for scripted/vllm/openai back-ends"),
        out: Path = typer.Option(None, "--out", "-o", help="output directory (default: runs/eval-<harness>-<UTC time>)"),
        as_json: bool = typer.Option(False, "--json", help="print the summary as JSON instead of tables"),
        harness_opt: list[str] = typer.Option([], "--harness-opt",
                                              help="KEY=VALUE option of the harness, e.g. max_turns=4, or "
                                              "HARNESS.KEY=VALUE for one of several (repeatable)"),
        launcher: str = typer.Option("local", "--launcher", "-l", help="local | kubernetes"),
        faults: str = typer.Option(None, "--faults", help="inject faults: 'default' (every recoverable kind), a "
                                   "YAML file or inline YAML in the env.options.faults format (docs/guides/faults.md)"),
        fault_fraction: float = typer.Option(None, "--fault-fraction", min=0.0, max=1.0,
                                             help="share of the task groups that get faults (with --faults)"),
    ) -> None:
        """Run every task k times (through each harness given); report pass@k, pass^k, mean reward per category
        (and per harness) and the failure taxonomy.

        Exits 3 when no rollout was valid, after showing the first error.

        Ctrl-C (SIGTERM) writes the finished rollouts as a partial summary (eval.json: interrupted), exits 130 (143)."""
        import datetime as dt

        from ..analysis.per_harness import harness_names, options_by_harness
        from ..faults.cli import fault_option
        from ..runner.evaluation import EvalRequest, run_eval, write_eval_dir
        from ._opts import either, parse_options

        given = either(harness_names(harness or []) or None, harness_names(harness_old or []) or None,
                       "--harness/-H", "-h", required=True)
        budget_s = either(budget_s, budget_old, "--budget-s", "--budget")
        from ..analysis.eval_many import normalize_backend
        from ._opts import check_run_backend

        for spec in backend:
            check_run_backend(spec)
        if len(backend) > 1 and len(given) > 1:
            raise typer.BadParameter("several --backend values are compared through one harness at a time; "
                                     f"got harnesses {', '.join(given)} — run forge eval once per harness",
                                     param_hint="--backend/--harness")
        options = options_by_harness(parse_options(harness_opt, "--harness-opt"), given)
        req = EvalRequest(harness=",".join(given), env=env, backend=normalize_backend(backend[0]), trials=trials,
                          split=None if split == "all" else split, tasks=list(task), concurrency=concurrency,
                          budget_s=budget_s, tokenizer=tokenizer, launcher=launcher,
                          harness_options=options[given[0]] if len(given) == 1 else {},
                          faults=fault_option(faults, fault_fraction))
        if out is None:
            out = Path("runs") / f"eval-{'+'.join(given)}-{dt.datetime.now(dt.timezone.utc):%Y%m%d-%H%M%S}"
        if len(backend) > 1:
            _eval_many(req, backend, out, as_json)
            return
        per: dict[str, Any] = {}
        store = _fresh_store(out)
        try:
            if len(given) == 1:
                summary, trajs = run_main(run_eval(req, progress=not as_json, run_dir=out, store=store))
            else:
                from ..runner.evaluation import run_eval_harnesses

                per, summary, trajs = run_main(run_eval_harnesses(req, given, options, progress=not as_json,
                                                                  run_dir=out, store=store))
        except KeyboardInterrupt:
            _interrupted(req, out, store, as_json, 130)
        except typer.Exit as e:  # SIGTERM (run_main: 143) keeps the finished rollouts too
            if e.exit_code == 143:
                _interrupted(req, out, store, as_json, 143)
            raise
        write_eval_dir(out, req, summary, trajs, per_harness=per)
        if as_json:
            typer.echo((out / "eval.json").read_text())
            _fail_if_nothing_valid(summary, trajs, out)
            return
        con = new_console()
        if per:
            from ..analysis.per_harness import harness_table

            con.print(harness_table(per, f"forge eval · {summary.tasks} tasks × {trials} trials, per harness"))
        con.print(_eval_table(summary))
        con.print(f"statuses: {_status_line(summary.statuses)}")
        if summary.scored_tasks < summary.tasks:
            con.print(f"[yellow]{summary.tasks - summary.scored_tasks} task(s) had fewer than {trials} valid trials "
                      "(infrastructure failures) and are left out of pass@k / pass^k[/]")
        from ..analysis.compare import behaviour_table

        con.print(behaviour_table(summary, title=f"behaviour ({summary.valid_trials} valid rollouts)"))
        con.print(f"wrote {out}/ (eval.json, trajectories.jsonl) — forge report {out}")
        _fail_if_nothing_valid(summary, trajs, out)

    @app.command("compare")
    def compare_cmd(
        runs: list[str] = typer.Argument(..., help="run directories, eval directories or trajectory files; "
                                         "RUN@STEP picks a training step (first, last, N) of that run"),
        k: int = typer.Option(None, "--k", min=1, help="k of pass@k (default: each run's eval k, else 1)"),
        step: str = typer.Option("all", "--step", help="training runs: all, first, last or a step number"),
        as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
    ) -> None:
        """Side-by-side metrics of runs (e.g. one model under several harnesses, or before vs after training)."""
        from ..analysis.compare import compare_runs, compare_table, split_run_arg
        from ..analysis.rundir import load_run

        parsed = [split_run_arg(r) for r in runs]
        loaded = [load_run(p) for p, _ in parsed]
        names = [(r.name, s) for r, (_, s) in zip(loaded, parsed)]
        for i, r in enumerate(loaded):  # two runs called "run" in different folders stay apart
            if names.count(names[i]) > 1:
                r.name = f"{r.name} ({r.path.parent.name or i})"
        rows = compare_runs(loaded, k=k, step=step, steps=[s for _, s in parsed])
        if as_json:  # each row carries its task_ids and harness: a script can make the same check
            typer.echo(json.dumps(rows, indent=1, default=str))
            return
        from ..analysis.per_harness import comparability_warnings

        con = new_console()
        con.print(compare_table(rows))
        for warning in comparability_warnings(rows):
            con.print(f"[yellow]warning: {warning}[/]")

    @app.command("report")
    def report_cmd(
        run: Path = typer.Argument(..., help="a run directory (training or forge eval output)"),
        out: Path = typer.Option(None, "--out", "-o", help="HTML file to write (default: RUN/report.html)"),
        tokenizer: str = typer.Option(None, "--tokenizer", help="decode token ids with this tokenizer (e.g. "
                                      "smollm2-135m; default: the run's own, from its config.yaml)"),
        max_trajectories: int = typer.Option(200, "--max-trajectories", min=1, help="trajectories in the viewer"),
    ) -> None:
        """Write ONE self-contained HTML report: curves, behaviour, statuses and a trajectory viewer."""
        from ..analysis.report import write_report
        from ..analysis.rundir import load_run

        data = load_run(run)
        detok = _report_detokenizer(data.config, tokenizer)
        target = out or (data.path / "report.html" if data.path.is_dir() else data.path.with_suffix(".html"))
        path = write_report(data, target, detokenize=detok, max_trajectories=max_trajectories)
        new_console().print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB, {len(data.trajectories)} trajectories)")
