"""``forge eval`` over several back-ends: the same tasks, harness and trials for each, one table.

Owns: :func:`backend_label` (a short, file-safe name per ``--backend``), :func:`eval_backends` (one
:func:`~openforge.analysis.evaluate.run_eval` per back-end, each written to ``OUT/<i>-<label>/`` as
``forge eval`` writes one) and :func:`comparison_rows` (the ``forge compare`` rows of those directories).

"Before and after training" in one command::

    forge eval -H react -e claw -b runs/claw-grpo-x@base -b runs/claw-grpo-x@last

A ``--backend`` without a ``KIND:`` prefix that names a run (``RUN@last`` / ``@best`` / ``@N`` /
``@base``) or a model directory means ``transformers:`` it. Back-ends run one after the other, so
only one policy model is in memory at a time.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .evaluate import EvalRequest, run_eval, write_eval_dir
from .passk import EvalSummary

__all__ = ["backend_label", "comparison_rows", "eval_backends", "normalize_backend"]


def normalize_backend(spec: str) -> str:
    """``RUN@sel`` or a model directory → ``transformers:…``; every other spec (``KIND:ARG``) unchanged."""
    path = spec.rpartition("@")[0] if "@" in spec and not Path(spec).exists() else spec
    if path and Path(path).expanduser().is_dir():
        return f"transformers:{spec}"
    return spec


def backend_label(spec: str) -> str:
    """``transformers:runs/claw-grpo-x@last`` → ``claw-grpo-x@last``; ``vllm:http://h:8000`` → ``vllm-h-8000``."""
    kind, _, arg = spec.partition(":")
    if kind == "transformers" and arg:
        run, at, sel = arg.rpartition("@") if "@" in arg else (arg, "", "")
        name = Path(run.rstrip("/")).name or run
        if name.startswith("step-") and Path(run).parent.name == "checkpoints":
            name = f"{Path(run).parent.parent.name}@{name[5:]}"
        label = f"{name}{at}{sel}"
    elif kind in ("vllm", "openai"):
        label = f"{kind}-{arg}"
    else:
        label = Path(arg).stem if arg else spec
    return re.sub(r"[^A-Za-z0-9_.@+-]+", "-", label).strip("-") or "backend"


async def eval_backends(req: EvalRequest, backends: Sequence[str], out: str | Path, *,
                        progress: bool = True) -> list[tuple[str, Path, EvalSummary]]:
    """Evaluate each back-end on ``req``'s tasks; ``(label, directory, summary)`` per back-end."""
    results = []
    for i, spec in enumerate(backends):
        spec = normalize_backend(spec)
        label = backend_label(spec)
        one = req.model_copy(update={"backend": spec})
        d = Path(out) / f"{i + 1}-{label}"
        summary, trajs = await run_eval(one, progress=progress, run_dir=d)
        write_eval_dir(d, one, summary, trajs)
        results.append((label, d, summary))
    return results


def comparison_rows(results: Sequence[tuple[str, Path, EvalSummary]], k: int) -> list[dict[str, Any]]:
    """``forge compare`` rows (one column per back-end) of :func:`eval_backends`' directories."""
    from .compare import compare_runs
    from .rundir import load_run

    runs = []
    labels = [label for label, _, _ in results]
    for i, (label, d, _) in enumerate(results):
        r = load_run(d)
        r.name = label if labels.count(label) == 1 else f"{i + 1}-{label}"
        runs.append(r)
    return compare_runs(runs, k=k)
