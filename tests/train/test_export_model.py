"""``forge export model``: a checkpoint becomes a Hugging Face model that plain transformers loads, with a
model card; an old checkpoint is completed from the base model; a veRL run's FSDP shards are merged by
veRL's own merger (a real 2-rank gloo/DTensor sharded checkpoint of a tiny llama, on CPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from openforge.config import dump_config, load_config
from openforge.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def _forge(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "openforge.cli.main", *args], capture_output=True, text=True,
                          env=env, timeout=300)


@pytest.fixture
def run_dir(tmp_path, tiny_llama, tokenizer):
    """A CPU run directory: config.yaml, metrics.jsonl, an eval, and checkpoints step-1..3 (trained steps)."""
    from openforge.proxy.render import hermes_template
    from openforge.train.checkpoint import Checkpoints
    from openforge.train.cpu import CPUTrainer, CPUTrainerConfig
    from openforge.train.grpo import TrainSample

    run = tmp_path / "claw-grpo-x"
    cfg = load_config({"recipe": "claw-grpo", "model": {"name": "smollm2-135m"}, "trainer": {"steps": 3}})
    run.mkdir()
    dump_config(cfg, run / "config.yaml")
    tr = CPUTrainer(tiny_llama, CPUTrainerConfig(lr=1e-2))
    ck = Checkpoints(run, cfg, trainer=tr, tokenizer=tokenizer, template=hermes_template(), parser="hermes")
    mask = [0, 0, 1, 1]
    sample = TrainSample(input_ids=[3, 4, 5, 6], loss_mask=mask, old_logprobs=[-4.0 * m for m in mask],
                         advantage=1.0, token_weights=[m / 2 for m in mask])
    lines = []
    for i, r in enumerate([0.25, 0.75, 0.5]):
        tr.step([sample])
        line = {"step": i + 1, "reward_mean": r, "pass_rate": r, "rollouts": 4, "gradient_step": True}
        lines.append(json.dumps(line))
        ck.after_step(i + 1, line, due=True)
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    (run / "eval-after").mkdir()
    (run / "eval-after" / "eval.json").write_text(json.dumps(
        {"k": 2, "tasks": 3, "pass_at_1": 0.5, "pass_at_k": 0.66, "pass_hat_k": 0.33, "mean_reward": 0.5}))
    return run


def test_export_cli_loads_with_plain_transformers(run_dir, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "exported"
    p = _forge("export", "model", str(run_dir), "--out", str(out))
    assert p.returncode == 0, p.stderr
    assert "--enable-auto-tool-choice --tool-call-parser hermes" in p.stdout
    names = {f.name for f in out.iterdir()}
    assert not names & {"trainer_state.pt", "trainer.json", "reference.safetensors"}
    assert {"config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja", "openforge.json",
            "README.md"} <= names
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    assert "<tools>" in tok.chat_template and model.config.num_hidden_layers == 2
    card = (out / "README.md").read_text()
    assert "base_model: HuggingFaceTB/SmolLM2-135M-Instruct" in card
    assert "--enable-auto-tool-choice --tool-call-parser hermes" in card
    assert "recipe `claw-grpo`" in card and "step 3" in card
    assert "| 2 | 0.750 | 0.750 | 4 | yes |" in card  # the run's training table
    assert "| `eval-after` | 3 × 2 | 0.500 |" in card  # the eval recorded in the run
    assert "recipe: claw-grpo" in card  # the resolved config


def test_export_best_and_refusals(run_dir, tmp_path):
    from openforge.train.export_model import export_model
    from openforge.util.modeldir import read_meta

    # scores: step-1 sampled step 2 (0.75), step-2 sampled step 3 (0.5): best is step-1 (kept by keep_best)
    res = export_model(run_dir, tmp_path / "best", best=True)
    assert res.step == 1 and read_meta(res.out).step == 1
    with pytest.raises(ConfigError, match="exists and is not empty"):
        export_model(run_dir, tmp_path / "best")
    with pytest.raises(ConfigError, match="no GRPO step 9"):
        export_model(run_dir, tmp_path / "gone", step=9)
    assert not (tmp_path / "gone").exists() and not list(tmp_path.glob(".*export-tmp"))


def test_export_completes_an_old_checkpoint(run_dir, tmp_path):
    """A checkpoint written before checkpoints were complete gets the base model's tokenizer and template."""
    from transformers import AutoTokenizer

    from openforge.proxy.render import hermes_template
    from openforge.train.export_model import export_model

    step = run_dir / "checkpoints" / "step-3"
    for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "openforge.json"):
        (step / f).unlink()
    res = export_model(step, tmp_path / "old")
    assert set(res.completed) == {"tokenizer", "chat template", "openforge.json"}
    assert AutoTokenizer.from_pretrained(res.out).chat_template == hermes_template()


# ------------------------------------------------------------------------------------ veRL


def _shard(rank: int, world: int, d: str, state: dict, port: int) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("fsdp",))
    sharded = {k: distribute_tensor(v, mesh, [Shard(0)]) for k, v in state.items()}
    torch.save(sharded, Path(d) / f"model_world_size_{world}_rank_{rank}.pt")
    dist.barrier()
    dist.destroy_process_group()


@pytest.mark.slow
def test_verl_fsdp_checkpoint_merges_to_the_same_format(tmp_path, tiny_llama, tokenizer):
    pytest.importorskip("verl", reason="veRL not installed (pip install 'openforge[verl]')")
    import socket

    import torch
    import torch.multiprocessing as mp
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from openforge.train.export_model import export_model

    run = tmp_path / "verl-run"
    cfg = load_config({"recipe": "claw-grpo", "model": {"name": "smollm2-135m"}, "trainer": {"backend": "verl"}})
    run.mkdir()
    dump_config(cfg, run / "config.yaml")
    actor = run / "checkpoints" / "global_step_4" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    tiny_llama.config.architectures = ["LlamaForCausalLM"]  # as a saved HF model's config has
    tiny_llama.config.save_pretrained(actor / "huggingface")  # veRL keeps the HF config + tokenizer here
    tokenizer.save_pretrained(actor / "huggingface")
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 2}))
    state = {k: v.detach().clone() for k, v in tiny_llama.state_dict().items() if k != "lm_head.weight"}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_shard, args=(2, str(actor), state, port), nprocs=2, join=True)

    res = export_model(run, tmp_path / "merged")
    assert res.command[1:4] == ["-m", "verl.model_merger", "merge"] and res.step == 4
    model = AutoModelForCausalLM.from_pretrained(res.out)
    merged = model.state_dict()
    for k, v in state.items():  # the shards were put back together exactly
        assert torch.equal(merged[k], v.to(merged[k].dtype)), k  # (veRL's merger writes its dtype, bf16)
    tok = AutoTokenizer.from_pretrained(res.out)
    assert "<tools>" in tok.chat_template  # the template the proxy rendered with
    assert "--tool-call-parser hermes" in (res.out / "README.md").read_text()
