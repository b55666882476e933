"""What was trained leaves the lab: train `claw-grpo --preset test`, then use its last checkpoint with no
extra file — `forge eval` (before and after in one table), `forge proxy serve` with the real openai SDK,
`forge export model` loaded by plain transformers — and check that every prompt recorded during training
is what the checkpoint's own tokenizer renders for that conversation. Real SmolLM2, real harness,
real proxy; several minutes on 2 cores: marked slow."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from testdeps import smollm2_tokenizer
from testservers import serve_address

# training alone takes 5-10 min on a loaded 2-core box
pytestmark = [pytest.mark.slow, pytest.mark.heavy(minutes=5), pytest.mark.timeout(1800)]  # 2.3 min here
openai = pytest.importorskip("openai")
ROOT = Path(__file__).resolve().parents[2]
HARNESS_OPTS = ["--harness-opt", "max_turns=2", "--harness-opt", "max_tokens=48", "--harness-opt", "max_output=400"]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "OPENFORGE_ADMIN_TOKEN"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _forge(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "openforge.cli.main", *args], capture_output=True, text=True,
                          env=_env(), timeout=timeout)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    smollm2_tokenizer()
    from openforge.runner.forge import run

    d = tmp_path_factory.mktemp("ckpt-e2e") / "claw-grpo"
    # the test preset, without its resample round (half the rollouts; the step still runs the optimizer)
    run(recipe="claw-grpo", preset="test", overrides=[f"run_dir={d}", "trainer.cpu.max_resample_rounds=0"],
        progress=False)
    return d


@pytest.fixture(scope="module")
def recorded(run_dir):
    from openforge.store import TrajectoryStore

    with TrajectoryStore(run_dir / "trajectories.db") as store:
        calls = {t.rollout_id: [c for c in t.calls if c.api == "chat" and c.exact] for t in store.trajectories()}
    assert any(calls.values())
    return calls


def test_last_checkpoint_is_complete(run_dir):
    from openforge.util.modeldir import check_model_dir, read_meta, resolve_checkpoint

    ck = resolve_checkpoint(run_dir, "last")
    check_model_dir(ck)
    meta = read_meta(ck)
    assert (meta.recipe, meta.step, meta.tool_call_parser, meta.harnesses) == ("claw-grpo", 1, "hermes", ["react"])
    index = json.loads((run_dir / "checkpoints" / "index.json").read_text())
    assert index["latest"] == ck.name and index["steps"][0]["step"] == 1


def _splice_base(call, earlier) -> list[int] | None:
    """The ids of the earlier call (its prompt + the policy's own output) that ``call``'s prompt continues."""
    for e in reversed(earlier):
        base = e.prompt_ids + e.output_ids
        if e.output_ids and call.prompt_ids[:len(base)] == base:
            return base
    return None


def test_training_prompts_are_what_the_checkpoint_renders(run_dir, recorded):
    """Every prompt of the run (teacher and policy rollouts) is what plain transformers renders from the
    checkpoint directory alone: a call that starts a conversation, token for token; a later turn, spliced
    onto the policy's own earlier tokens (never re-tokenized: the model may have sampled a non-canonical
    split of its tool call), is those tokens followed by exactly the checkpoint's rendering of the rest."""
    from transformers import AutoTokenizer

    from openforge.proxy.wire_chat import ChatAdapter
    from openforge.util.modeldir import resolve_checkpoint

    tok = AutoTokenizer.from_pretrained(resolve_checkpoint(run_dir, "last"))
    whole = spliced = 0
    for calls in recorded.values():
        for i, c in enumerate(calls):
            req = ChatAdapter().parse(c.request)  # the wire request → transformers' chat form
            kw = dict(tools=req.tools or None, add_generation_prompt=True)
            base = _splice_base(c, calls[:i])
            if base is None:
                ids = tok.apply_chat_template(req.messages, tokenize=True, return_dict=False, **kw)
                assert list(ids) == c.prompt_ids, f"call {c.index}"
                whole += 1
                continue
            rest = c.prompt_ids[len(base):]
            text = tok.apply_chat_template(req.messages, tokenize=False, **kw)
            assert rest and text.endswith(tok.decode(rest)), f"call {c.index}"
            assert tok(tok.decode(rest), add_special_tokens=False)["input_ids"] == rest, f"call {c.index}"
            spliced += 1
    assert whole and spliced, (whole, spliced)  # both kinds were checked


def test_forge_eval_before_and_after_in_one_command(run_dir, recorded, tmp_path):
    out = tmp_path / "eval"
    task = sorted({t for t in _task_ids(run_dir)})[0]
    p = _forge("eval", "-H", "react", "-e", "claw", "--split", "train", "--task", task, "-k", "1",
               "-b", f"{run_dir}@base", "-b", f"{run_dir}@last", "-o", str(out), *HARNESS_OPTS)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "claw-grpo@base" in p.stdout and "claw-grpo@last" in p.stdout and "pass@1" in p.stdout
    for d in ("1-claw-grpo@base", "2-claw-grpo@last"):
        s = json.loads((out / d / "eval.json").read_text())
        assert s["trials"] == 1 and s["valid_trials"] == 1, s["statuses"]


def _task_ids(run_dir: Path) -> set[str]:
    from openforge.store import TrajectoryStore

    with TrajectoryStore(run_dir / "trajectories.db") as store:
        return {t.task_id for t in store.trajectories()}


def test_forge_proxy_serve_of_the_checkpoint_renders_training_prompts(run_dir, recorded):
    """The longest recorded conversation, sent afresh to `forge proxy serve` of the checkpoint, is prompted
    with what the checkpoint renders for it: the recorded ids where the run rendered that call whole
    (a later turn's recorded ids keep the policy's own tokens, which a fresh conversation cannot have)."""
    from transformers import AutoTokenizer

    from openforge.proxy.wire_chat import ChatAdapter
    from openforge.util.modeldir import resolve_checkpoint

    # the longest conversation, with the calls of its rollout before it
    call, earlier = max(((c, cs[:i]) for cs in recorded.values() for i, c in enumerate(cs)),
                        key=lambda ce: len(ce[0].request.get("messages", [])))
    tok = AutoTokenizer.from_pretrained(resolve_checkpoint(run_dir, "last"))
    proc = subprocess.Popen([sys.executable, "-m", "openforge.cli.main", "proxy", "serve", "--backend",
                             f"transformers:{resolve_checkpoint(run_dir, 'last')}", "--port", "0", "--max-tokens", "8"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env())
    try:
        url, token = serve_address(proc)
        auth = {"authorization": f"Bearer {token}"}
        h = httpx.post(f"{url}/admin/rollouts", json={"task_id": "served"}, headers=auth).json()
        client = openai.OpenAI(base_url=h["openai_base_url"], api_key=h["api_key"], max_retries=0)
        body = {k: v for k, v in call.request.items() if k in ("messages", "tools")}
        r = client.chat.completions.create(model="served", max_tokens=8, **body)
        assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")
        traj = httpx.post(f"{url}/admin/rollouts/{h['rollout_id']}/finish", json={"reward": 0}, headers=auth,
                          timeout=60).json()
        served = traj["calls"][0]["prompt_ids"]
        req = ChatAdapter().parse(call.request)
        assert served == list(tok.apply_chat_template(req.messages, tools=req.tools or None, tokenize=True,
                                                      add_generation_prompt=True, return_dict=False))
        if _splice_base(call, earlier) is None:
            assert served == call.prompt_ids  # served = trained, token for token
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)


def test_exported_model_loads_with_plain_transformers(run_dir, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "model"
    p = _forge("export", "model", str(run_dir), "--out", str(out))
    assert p.returncode == 0, p.stderr
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    ids = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True,
                                  return_tensors="pt", return_dict=True)
    with torch.no_grad():
        gen = model.generate(**ids, max_new_tokens=2, do_sample=False)
    assert gen.shape[1] == ids["input_ids"].shape[1] + 2
    assert "--tool-call-parser hermes" in (out / "README.md").read_text()
