"""veRL's own trainer on CPU: openforge's ``cpu`` platform plugin, the transformers rollout replica and
the ``trainer.verl.device=cpu`` launcher settings (see docs/verl.md).

The heavy test runs the real ``verl.trainer.main_ppo`` through the ``verl`` recipe preset with only
device/size overrides: openforge's agent loop, the real proxy, the react harness in the real sandbox,
SmolLM2-135M on the claw tasks, 2 GRPO steps; it fails unless rewards reach veRL, veRL computes
advantages, the actor's weights change between the steps, the rollout engine serves the new weights
(logprobs of a fixed prompt change after each weight sync) and the checkpoint merges with
``forge export model``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from openforge.recipes import load_recipe_config
from openforge.task import Task

ROOT = Path(__file__).resolve().parents[2]


def _cpu_cfg(*extra: str):
    return load_recipe_config("claw-grpo", preset="verl", overrides=[
        "model.name=smollm2-135m", "trainer.verl.device=cpu", "trainer.verl.n_gpus_per_node=1", *extra])


def test_device_cpu_overrides_and_environment(tmp_path):
    """Pure: device=cpu swaps the vLLM rollout for the CPU replica, asks for FSDP2 + logical GPUs + a small
    Ray, and the run's environment (and command.sh) loads the platform plugin; device=cuda adds none of it."""
    from openforge.train.verl.launch import launch, run_env, verl_overrides

    cfg = _cpu_cfg("trainer.verl.ray_num_cpus=3", "trainer.verl.ray_object_store_mb=200")
    ov = verl_overrides(cfg, train_file="t", val_file="v", agent_loop_path="a", run_dir=tmp_path)
    assert "actor_rollout_ref.rollout.name=transformers" in ov and "actor_rollout_ref.rollout.name=vllm" not in ov
    for o in ("trainer.device=cpu", "actor_rollout_ref.actor.strategy=fsdp2", "+ray_kwargs.ray_init.num_gpus=1",
              "+ray_kwargs.ray_init.num_cpus=3", f"+ray_kwargs.ray_init.object_store_memory={200 << 20}"):
        assert o in ov, o
    model = next(o for o in ov if o.startswith("actor_rollout_ref.model.path="))
    assert (Path(model.split("=", 1)[1]) / "config.json").is_file()  # the alias became an HF directory
    env = run_env(cfg)
    assert env["VERL_PLATFORM"] == "cpu" and env["VERL_USE_EXTERNAL_MODULES"] == "openforge.train.verl.cpu"
    res = launch(cfg, tmp_path / "r", [Task(id="t0", instruction="do", environment="claw")], dry_run=True)
    script = (tmp_path / "r" / "verl" / "command.sh").read_text()
    assert "export VERL_PLATFORM=cpu" in script and res["rc"] is None
    gpu = load_recipe_config("claw-grpo", preset="verl")
    ov = verl_overrides(gpu, train_file="t", val_file="v", agent_loop_path="a", run_dir=tmp_path)
    assert "actor_rollout_ref.rollout.name=vllm" in ov and not any("ray_init" in o for o in ov)
    assert "VERL_PLATFORM" not in run_env(gpu) or os.environ.get("VERL_PLATFORM")


def test_device_cpu_overrides_compose_with_verl_config(tmp_path):
    """veRL's own Hydra config accepts every CPU override (a key veRL renamed would fail here)."""
    verl = pytest.importorskip("verl", reason="verl not installed: pip install 'openforge[verl]' (verl==0.9.1)")
    from hydra import compose, initialize_config_dir

    from openforge.train.verl.launch import launch

    res = launch(_cpu_cfg(), tmp_path, [Task(id="t0", instruction="do", environment="claw")], dry_run=True)
    with initialize_config_dir(config_dir=str(Path(verl.__file__).parent / "trainer" / "config"), version_base=None):
        c = compose(config_name="ppo_trainer", overrides=res["command"][3:])
    assert c.trainer.device == "cpu" and c.actor_rollout_ref.rollout.name == "transformers"
    assert c.actor_rollout_ref.actor.strategy == "fsdp2" and c.ray_kwargs.ray_init.num_gpus == 1


_PLUGIN_CHECK = """
import json
import verl
from verl.plugin.platform import get_platform
from verl.utils.device import get_device_id, get_device_name
from verl.utils import distributed
from verl.workers.engine.base import EngineRegistry
from verl.workers.rollout.base import get_rollout_class
from verl.workers.rollout.replica import get_rollout_replica_class
p = get_platform()
print(json.dumps({"platform": type(p).__name__, "backend": p.communication_backend_name(),
    "device": get_device_name(), "device_id": str(get_device_id()), "ray": p.ray_resource_name(),
    "fsdp2_cpu": EngineRegistry._engines["language_model"]["fsdp2"]["cpu"].__name__,
    "replica": get_rollout_replica_class("transformers").__name__,
    "adapter": get_rollout_class("transformers", "async").__name__,
    "gloo_patch": getattr(distributed.initialize_global_process_group_ray, "_openforge_cpu", False)}))
"""


def test_cpu_platform_plugin_registers_what_verl_needs():
    """In a fresh process with the run's environment: veRL picks the cpu platform (gloo, torch.device('cpu')
    as the device, Ray's GPU resource), FSDP engines for cpu, the transformers replica and adapter."""
    pytest.importorskip("verl", reason="verl not installed: pip install 'openforge[verl]' (verl==0.9.1)")
    from openforge.train.verl.launch import run_env

    env = {**run_env(_cpu_cfg()), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", _PLUGIN_CHECK], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"platform": "CPUPlatform", "backend": "gloo", "device": "cpu", "device_id": "cpu", "ray": "GPU",
                   "fsdp2_cpu": "FSDPEngineWithLMHead", "replica": "TransformersReplica",
                   "adapter": "TransformersServerAdapter", "gloo_patch": True}


@pytest.mark.slow
async def test_rollout_server_serves_the_weights_it_is_sent(tmp_path, monkeypatch):
    """The replica's server answers veRL's generate() with exact ids + logprobs tagged with the weight step;
    after load_weights the probe logprobs are those of the new weights; foreign weights are refused."""
    pytest.importorskip("verl", reason="verl not installed: pip install 'openforge[verl]' (verl==0.9.1)")
    import torch
    from safetensors.torch import save_file

    from openforge.train.verl.cpu_replica import TransformersRolloutServer
    from openforge.train.verl.launch import model_path

    monkeypatch.setenv("OPENFORGE_VERL_PROBE_DIR", str(tmp_path / "probe"))
    server = TransformersRolloutServer(model_path("smollm2-135m"), 0)
    prompt = server.backend.tokenizer.encode("Hello", add_special_tokens=False)
    out = await server.generate("r1", prompt, {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_tokens": 4,
                                              "logprobs": True})
    assert 1 <= len(out.token_ids) <= 4 and len(out.log_probs) == len(out.token_ids)
    assert out.extra_fields == {"global_steps": None}
    before = server.probe_logprobs()
    state = {k: v.clone() for k, v in server.backend.model.state_dict().items() if k != "lm_head.weight"}
    state["model.norm.weight"] = state["model.norm.weight"] * 1.5
    save_file(state, tmp_path / "w.safetensors")
    await server.load_weights(str(tmp_path / "w.safetensors"), 1)
    after = server.probe_logprobs()
    assert max(abs(a - b) for a, b in zip(before, after)) > 1e-3
    assert torch.equal(server.backend.model.model.norm.weight, state["model.norm.weight"])
    out = await server.generate("r2", prompt, {"temperature": 1.0, "max_tokens": 2})
    assert out.extra_fields["global_steps"] == 1
    lines = [json.loads(x) for x in (tmp_path / "probe" / "probe.jsonl").read_text().splitlines()]
    assert [x["global_steps"] for x in lines] == [None, 1] and lines[0]["weights"] != lines[1]["weights"]
    save_file({"not.a.param": torch.zeros(2)}, tmp_path / "bad.safetensors")
    with pytest.raises(ValueError, match="lacks"):
        await server.load_weights(str(tmp_path / "bad.safetensors"), 2)
