"""The model card (``README.md``) of an exported model.

Owns: :func:`model_card` — Hugging Face front matter (base model, library, tags), how to load and serve
the model (``transformers``, vLLM with its tool-call parser flags, ``forge proxy serve``), the training
record of the run (recipe, harnesses, the per-step table of ``metrics.jsonl``), the evaluation results
recorded in the run directory (every ``eval.json`` under it and the ``eval`` entries of
``summary.json``) and the resolved run config.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..util.modeldir import ModelMeta

__all__ = ["model_card", "vllm_flags"]


def vllm_flags(parser: str) -> str:
    """The vLLM flags that parse this model's tool calls the way openforge trained it to write them."""
    return f"--enable-auto-tool-choice --tool-call-parser {parser}"


def _metrics(run: Path) -> list[dict[str, Any]]:
    f = run / "metrics.jsonl"
    if not f.is_file():
        return []
    rows = []
    for line in f.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


def _fmt(v: Any) -> str:
    return f"{v:.3f}" if isinstance(v, float) else ("–" if v is None else str(v))


def _training_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| step | mean reward | pass rate | rollouts | gradient step |", "|---:|---:|---:|---:|:---|"]
    for r in rows:
        if r.get("phase") == "sft":
            lines.append(f"| sft | – | {_fmt(r.get('teacher_pass_rate'))} (teacher) | {_fmt(r.get('trajectories'))} "
                         f"| {_fmt(r.get('steps'))} SFT steps |")
        elif "step" in r:
            lines.append(f"| {r['step']} | {_fmt(r.get('reward_mean'))} | {_fmt(r.get('pass_rate'))} | "
                         f"{_fmt(r.get('rollouts'))} | {'yes' if r.get('gradient_step', True) else 'no'} |")
    return "\n".join(lines) if len(lines) > 2 else "No training step recorded."


def _evals(run: Path) -> str:
    out = []
    for f in sorted(run.rglob("eval.json")):
        try:
            s = json.loads(f.read_text())
        except ValueError:
            continue
        out.append(f"| `{f.parent.relative_to(run)}` | {_fmt(s.get('tasks'))} × {_fmt(s.get('k'))} | "
                   f"{_fmt(s.get('pass_at_1'))} | {_fmt(s.get('pass_at_k'))} | {_fmt(s.get('pass_hat_k'))} | "
                   f"{_fmt(s.get('mean_reward'))} |")
    summary = run / "summary.json"
    extra = ""
    if summary.is_file():
        try:
            data = json.loads(summary.read_text())
        except ValueError:
            data = {}
        recorded = {k: v for k, v in data.items() if "eval" in k.lower()}
        if recorded:
            extra = "\n\nRecorded in `summary.json`:\n\n```json\n" + json.dumps(recorded, indent=1) + "\n```"
    if not out:
        return ("No evaluation was recorded in the run directory. Evaluate this model with "
                "`forge eval -b transformers:THIS_DIR ...`." + extra)
    head = ["| eval | tasks × trials | pass@1 | pass@k | pass^k | mean reward |", "|---|---:|---:|---:|---:|---:|"]
    return "\n".join(head + out) + extra


def model_card(meta: ModelMeta, *, run: Path | None, out_name: str) -> str:
    """The ``README.md`` of an exported model."""
    flags = vllm_flags(meta.tool_call_parser)
    config = (run / "config.yaml").read_text() if run is not None and (run / "config.yaml").is_file() else ""
    rows = _metrics(run) if run is not None else []
    return f"""---
base_model: {meta.base_model}
library_name: transformers
pipeline_tag: text-generation
tags: [openforge, {meta.algorithm}, agent, tool-use]
---

# {meta.run} · step {meta.step}

Trained with openforge recipe `{meta.recipe}` ({meta.algorithm}) inside the
`{', '.join(meta.harnesses)}` harness(es) on the `{meta.environment}` environment, starting from
`{meta.base_model}` (run model `{meta.init_model}`). Weights after {meta.step} GRPO step(s)
(0: after the SFT warm-start). openforge {meta.openforge_version}, saved {meta.created_at}.

## Use

The chat template (`chat_template.jinja`, sha256 `{meta.chat_template_sha256[:16]}…`) is the exact template,
tools included, that rendered every training prompt; `tokenizer.apply_chat_template(messages, tools=tools)`
reproduces those prompts token for token. Tool calls are written Hermes-style
(`<tool_call>{{"name": ..., "arguments": ...}}</tool_call>`): parse them with the `{meta.tool_call_parser}` parser.

```python
from transformers import AutoModelForCausalLM, AutoTokenizer
tok = AutoTokenizer.from_pretrained("{out_name}")
model = AutoModelForCausalLM.from_pretrained("{out_name}")
```

```sh
vllm serve {out_name} {flags}
forge proxy serve --backend transformers:{out_name}     # openforge's proxy: records every call token-exactly
forge eval -H {meta.harnesses[0]} -e {meta.environment} -b transformers:{out_name}
```

## Training

{_training_table(rows)}

## Evaluation

{_evals(run) if run is not None else "No run directory was available."}

## Config

```yaml
{config.rstrip() or "# (the run's config.yaml was not found)"}
```
"""
