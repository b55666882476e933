"""Train–deploy parity: the prompt the proxy rendered at training time, the same conversation (tools
included) rendered from the exported model by plain ``transformers.apply_chat_template``, and the prompt
``forge proxy serve`` renders when it serves the exported model again, are the same token ids.

Real pieces: the training-time proxy exactly as a run builds it (``ProxyServer`` over a
``TransformersBackend``; the model is a small random llama with SmolLM2's vocabulary so it runs in
seconds), the real openai SDK, a real checkpoint + ``forge export model``, ``forge proxy serve`` as a
process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from testservers import serve_address

openai = pytest.importorskip("openai")
ROOT = Path(__file__).resolve().parents[2]

TOOLS = [
    {"type": "function", "function": {"name": "read_file", "description": "Read a file.",
                                      "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                                                     "required": ["path"]}}},
    {"type": "function", "function": {"name": "shell", "description": "Run a shell command.",
                                      "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}},
]
ARGS = {"path": "notes/todo.txt"}
WIRE = [  # what a harness sends (OpenAI wire: tool-call arguments are a JSON string)
    {"role": "system", "content": "You are a careful agent. Use the tools."},
    {"role": "user", "content": "What is on my todo list? Answer in one line."},
    {"role": "assistant", "content": None,
     "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": json.dumps(ARGS)}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "- buy milk\n- fix the build"},
]
HF = [  # the same conversation in transformers' chat form (tool-call arguments are a dict)
    WIRE[0], WIRE[1],
    {"role": "assistant", "content": "",
     "tool_calls": [{"type": "function", "function": {"name": "read_file", "arguments": ARGS}}]},
    {"role": "tool", "content": "- buy milk\n- fix the build"},
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tokenizer):
    """A training-time recorded prompt, and the exported model of a checkpoint of that policy."""
    import asyncio

    import torch
    import transformers

    from openforge.config import dump_config, load_config
    from openforge.proxy.backends.transformers import TransformersBackend
    from openforge.proxy.server import ProxyServer
    from openforge.train.checkpoint import Checkpoints
    from openforge.train.cpu import CPUTrainer
    from openforge.train.export_model import export_model

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32,
                                   num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                   max_position_embeddings=2048, tie_word_embeddings=True,
                                   eos_token_id=tokenizer.eos_token_id)
    model = transformers.LlamaForCausalLM(cfg).eval()
    run = tmp_path_factory.mktemp("parity") / "run"
    run.mkdir()
    rcfg = load_config({"recipe": "parity", "model": {"name": "smollm2-135m"}})
    dump_config(rcfg, run / "config.yaml")

    async def train_time() -> tuple[list[int], Path]:
        async with ProxyServer(TransformersBackend(model, tokenizer), sampling={"max_tokens": 4}) as proxy:
            h = proxy.create_rollout("parity", harness="test")
            client = openai.AsyncOpenAI(base_url=h.openai_base_url, api_key=h.api_key, max_retries=0)
            await client.chat.completions.create(model="policy", messages=WIRE, tools=TOOLS, max_tokens=4)
            traj = proxy.finish_rollout(h.rollout_id, reward=0.0)
            ck = Checkpoints(run, rcfg, trainer=CPUTrainer(model), tokenizer=tokenizer,
                             template=proxy.renderer.template, parser=proxy.renderer.parser.name)
            ck.weights_changed_before_training()
            ck.after_step(1, {"reward_mean": 0.0, "rollouts": 1}, due=True)
            return traj.calls[0].prompt_ids, ck.dir / "step-1"

    prompt_ids, _ = asyncio.run(train_time())
    out = export_model(run, run.parent / "exported").out
    return prompt_ids, out


def test_plain_transformers_renders_the_training_prompt(trained):
    from transformers import AutoTokenizer

    prompt_ids, out = trained
    tok = AutoTokenizer.from_pretrained(out)  # the exported directory alone
    ids = tok.apply_chat_template(HF, tools=TOOLS, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert list(ids) == prompt_ids
    assert len(prompt_ids) > 150  # tools, system, a tool call and its result were all rendered


def test_plain_transformers_default_template_would_differ(trained, tokenizer):
    """What the parity protects against: the base tokenizer's own template renders other ids."""
    prompt_ids, _ = trained
    ids = tokenizer.apply_chat_template(HF, tools=TOOLS, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert list(ids) != prompt_ids


def test_forge_proxy_serve_renders_the_training_prompt(trained, tmp_path):
    prompt_ids, out = trained
    env = {k: v for k, v in os.environ.items() if k != "OPENFORGE_ADMIN_TOKEN"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.Popen([sys.executable, "-m", "openforge.cli.main", "proxy", "serve", "--backend",
                             f"transformers:{out}", "--port", "0", "--max-tokens", "4"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        url, token = serve_address(proc)
        auth = {"authorization": f"Bearer {token}"}
        h = httpx.post(f"{url}/admin/rollouts", json={"task_id": "parity"}, headers=auth).json()
        client = openai.OpenAI(base_url=h["openai_base_url"], api_key=h["api_key"], max_retries=0)
        client.chat.completions.create(model="policy", messages=WIRE, tools=TOOLS, max_tokens=4)
        traj = httpx.post(f"{url}/admin/rollouts/{h['rollout_id']}/finish", json={"reward": 0}, headers=auth,
                          timeout=60).json()
        assert traj["calls"][0]["prompt_ids"] == prompt_ids
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
