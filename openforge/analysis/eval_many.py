"""``forge eval`` over several back-ends: the same tasks, harness and trials for each, one table.

Owns: :func:`backend_label` (a short, file-safe name per ``--backend``), :func:`normalize_backend` and
:func:`comparison_rows` (the ``forge compare`` rows of the directories that
:func:`openforge.runner.evaluation.eval_backends` writes, one per back-end, as ``forge eval`` writes one).

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

from .passk import EvalSummary

__all__ = ["backend_label", "comparison_rows", "normalize_backend"]


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


def comparison_rows(results: Sequence[tuple[str, Path, EvalSummary]], k: int) -> list[dict[str, Any]]:
    """``forge compare`` rows (one column per back-end) of :func:`openforge.runner.evaluation.eval_backends`' directories."""
    from .compare import compare_runs
    from .rundir import load_run

    runs = []
    labels = [label for label, _, _ in results]
    for i, (label, d, _) in enumerate(results):
        r = load_run(d)
        r.name = label if labels.count(label) == 1 else f"{i + 1}-{label}"
        runs.append(r)
    return compare_runs(runs, k=k)
