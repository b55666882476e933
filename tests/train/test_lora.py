"""LoRA in the CPU trainer (``trainer.cpu.lora``): AdamW holds only the adapter, checkpoints hold only the
adapter (and name their base), ``RUN@last`` and ``forge export model`` give base + adapter with the trained
logits, a resumed trainer continues the adapter, the back-end samples the updated adapter, and bad settings
get errors in the config's terms.

Real pieces: ``peft``, the CPU trainer on a tiny random llama, the real checkpoint writer, loader, exporter
and TransformersBackend (its prefix KV cache on)."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from openforge.config import CPUTrainerConfig, LoraConfig, dump_config, load_config  # noqa: E402
from openforge.core.errors import ConfigError  # noqa: E402
from openforge.train.cpu import CPUTrainer  # noqa: E402
from openforge.train.grpo import TrainSample  # noqa: E402

LORA = {"rank": 2, "alpha": 8.0}


def _sample(ids=(3, 5, 7, 9, 11, 13), adv=1.0):
    mask = [0, 0] + [1] * (len(ids) - 2)
    return TrainSample(input_ids=list(ids), loss_mask=mask, old_logprobs=[-4.0 * m for m in mask], advantage=adv,
                       token_weights=[m / sum(mask) for m in mask])


def _logits(model, ids=(3, 5, 7, 9, 11, 13, 17, 19)):
    with torch.no_grad():
        return model(torch.tensor([list(ids)])).logits


def test_optimizer_state_holds_only_the_adapter(tiny_llama):
    base = {n: p.detach().clone() for n, p in tiny_llama.named_parameters()}
    tr = CPUTrainer(tiny_llama, CPUTrainerConfig(lr=1e-2, lora=LoraConfig(**LORA)))
    before = _logits(tiny_llama)
    tr.step([_sample()])
    tr.step([_sample(adv=-1.0)])
    names = {id(p): n for n, p in tiny_llama.named_parameters()}
    state = [names[id(p)] for p in tr.optimizer.state]
    assert state and all(".lora_A." in n or ".lora_B." in n for n in state)
    assert len(state) == sum(1 for n in names.values() if "lora_" in n)
    for n, p in tiny_llama.named_parameters():  # the base did not move; the policy did
        if "lora_" not in n:
            assert torch.equal(p, base[n.replace(".base_layer", "")]), n
    assert not torch.allclose(_logits(tiny_llama), before)


@pytest.fixture
def lora_run(tmp_path, tiny_llama, tokenizer):
    """A run directory whose starting model is a saved tiny llama, trained two LoRA steps, checkpointed."""
    from openforge.proxy.render import hermes_template
    from openforge.train.checkpoint import Checkpoints

    base = tmp_path / "base"
    tiny_llama.save_pretrained(base)
    tokenizer.save_pretrained(base)
    full_bytes = (base / "model.safetensors").stat().st_size
    cfg = load_config({"recipe": "lora-test", "model": {"name": str(base)},
                       "trainer": {"steps": 2, "cpu": {"lr": 1e-2, "kl_coef": 0.1, "lora": LORA}}})
    run = tmp_path / "run"
    run.mkdir()
    dump_config(cfg, run / "config.yaml")
    tr = CPUTrainer(tiny_llama, cfg.trainer.cpu)
    ck = Checkpoints(run, cfg, trainer=tr, tokenizer=tokenizer, template=hermes_template(), parser="hermes")
    for step in (1, 2):
        tr.step([_sample(adv=1.0 if step == 1 else -0.5)])
        ck.after_step(step, {"reward_mean": 0.5, "rollouts": 4, "gradient_step": True}, due=True)
    return run, tr, full_bytes


def test_checkpoint_holds_the_adapter_and_names_its_base(lora_run):
    import json

    run, _, full_bytes = lora_run
    d = run / "checkpoints" / "step-2"
    names = {f.name for f in d.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "trainer_state.pt", "reference.safetensors",
            "tokenizer_config.json", "chat_template.jinja", "openforge.json"} <= names
    assert "model.safetensors" not in names and "config.json" not in names
    assert (d / "adapter_model.safetensors").stat().st_size < 0.3 * full_bytes
    assert (d / "reference.safetensors").stat().st_size < 0.3 * full_bytes  # the KL reference: an adapter too
    assert json.loads((d / "adapter_config.json").read_text())["base_model_name_or_path"] == str(run.parent / "base")


def test_run_last_and_export_are_base_plus_adapter(lora_run, tmp_path):
    from transformers import AutoModelForCausalLM

    from openforge.proxy.backends.hf_loading import load_model
    from openforge.train.export_model import export_model

    run, tr, _ = lora_run
    trained = _logits(tr.model)
    base, _ = load_model(str(run.parent / "base"))
    assert not torch.allclose(_logits(base), trained, atol=1e-4)  # the adapter matters

    loaded, tok = load_model(f"{run}@last")
    assert not any("lora_" in n for n, _ in loaded.named_parameters())  # merged: a plain model
    torch.testing.assert_close(_logits(loaded), trained, atol=1e-5, rtol=1e-5)
    assert tok.eos_token == "<|im_end|>"

    out = tmp_path / "exported"
    export_model(run, out)
    assert not (out / "adapter_config.json").exists() and (out / "config.json").is_file()
    plain = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    torch.testing.assert_close(_logits(plain), trained, atol=1e-5, rtol=1e-5)


def test_resume_continues_the_adapter_and_its_optimizer(lora_run, tiny_llama):
    from openforge.proxy.backends.hf_loading import load_model

    run, tr, _ = lora_run
    fresh, _ = load_model(str(run.parent / "base"))
    tr2 = CPUTrainer(fresh, tr.config)
    tr2.load(run / "checkpoints" / "step-2")
    torch.testing.assert_close(_logits(fresh), _logits(tr.model), atol=0, rtol=0)
    assert tr2.step_count == tr.step_count and len(tr2.optimizer.state) == len(tr.optimizer.state)
    torch.testing.assert_close(_logits(tr2.ref_model), _logits(tr.ref_model), atol=0, rtol=0)

    full = CPUTrainer(copy.deepcopy(tiny_llama), CPUTrainerConfig())
    with pytest.raises(ConfigError, match=r"holds a LoRA adapter but trainer\.cpu\.lora is not set"):
        full.load(run / "checkpoints" / "step-2")
    other, _ = load_model(str(run.parent / "base"))
    with pytest.raises(ConfigError, match=r"its LoRA adapter does not fit trainer\.cpu\.lora"):
        CPUTrainer(other, CPUTrainerConfig(lora=LoraConfig(rank=4))).load(run / "checkpoints" / "step-2")
    full_ck = full.save(run.parent / "full-ck")
    again, _ = load_model(str(run.parent / "base"))
    with pytest.raises(ConfigError, match="written by full fine-tuning"):
        CPUTrainer(again, tr.config).load(full_ck)


@pytest.mark.parametrize("packed", [False, True], ids=["plain", "packed_linears"])
async def test_backend_samples_the_updated_adapter(tiny_llama, packed):
    """The back-end serves the trainer's module: after a LoRA step its recorded logprobs are the trained
    policy's, also for a prompt whose prefix it cached before the step."""
    from openforge.proxy.backends.base import SamplingParams
    from openforge.proxy.backends.transformers import TransformersBackend
    from openforge.train.logprobs import token_logprobs

    backend = TransformersBackend(tiny_llama, tokenizer=None, packed_linears=packed)
    tr = CPUTrainer(tiny_llama, CPUTrainerConfig(lr=5e-2, lora=LoraConfig(**LORA)))
    prompt = [(7 * i) % 90 + 3 for i in range(40)]

    async def gen(ids):
        g = await backend.generate(ids, SamplingParams(temperature=1.0, max_tokens=4, seed=1))
        return g.output_ids, g.logprobs

    def trainer_logprobs(ids, n):
        t = torch.tensor([ids])
        with torch.no_grad():
            return token_logprobs(tr.model, t, torch.ones_like(t))[0, -n:].tolist()

    out, _ = await gen(prompt)
    nxt = prompt + out + [4, 5, 6]
    await gen(nxt)
    assert backend.prefix is not None and backend.prefix.hits > 0  # the prefix is served from the cache
    for _ in range(3):
        tr.step([_sample(ids=nxt[:20], adv=1.0)])
    hits = backend.prefix.hits
    out2, lp2 = await gen(nxt)
    assert backend.prefix.hits == hits  # the keys/values of the old adapter were not reused
    torch.testing.assert_close(torch.tensor(lp2), torch.tensor(trainer_logprobs(nxt + out2, len(out2))),
                               atol=1e-3 if packed else 1e-4, rtol=0)  # packed: another kernel's rounding
    if packed and backend.packed is not None and backend.packed.supported:
        assert backend.packed.packs >= 2  # the packed copy was rebuilt from the stepped adapter


@pytest.mark.parametrize(("cpu", "message"), [
    ({"lora": {"rank": 0}}, "trainer.cpu.lora.rank: Input should be greater than or equal to 1"),
    ({"lora": {"alpha": -1}}, "trainer.cpu.lora.alpha: Input should be greater than 0"),
    ({"lora": {"dropout": 1.0}}, "trainer.cpu.lora.dropout: Input should be less than 1"),
    ({"lora": {"target_modules": "everything"}}, "target_modules: expected 'all-linear' or a list of module names"),
    ({"lora": {"target_modules": []}}, "target_modules: the list of module names is empty"),
    ({"lora": {"rank": 4, "r": 4}}, "trainer.cpu.lora.r: unknown key"),
    ({"lora": {}, "trainable_layers": 1}, "lora and trainable_layers are exclusive"),
])
def test_config_errors(cpu, message):
    with pytest.raises(ConfigError) as e:
        load_config({"trainer": {"cpu": cpu}})
    assert message in str(e.value)


def test_config_off_by_default_and_overrides():
    assert load_config({}).trainer.cpu.lora is None
    cfg = load_config({}, overrides=["trainer.cpu.lora.rank=8", "trainer.cpu.lora.target_modules=[q_proj,v_proj]"])
    assert cfg.trainer.cpu.lora == LoraConfig(rank=8, target_modules=["q_proj", "v_proj"])


def test_unknown_target_modules_are_named(tiny_llama):
    with pytest.raises(ConfigError, match=r"trainer\.cpu\.lora: .*no_such_proj"):
        CPUTrainer(tiny_llama, CPUTrainerConfig(lora=LoraConfig(target_modules=["no_such_proj"])))


def test_verl_gets_the_same_lora(tmp_path):
    from openforge.train.verl.launch import lora_overrides

    cfg = load_config({"trainer": {"backend": "verl", "cpu": {"lora": {"rank": 8, "alpha": 16,
                                                                         "target_modules": ["q_proj", "v_proj"]}}}})
    assert lora_overrides(cfg) == ["actor_rollout_ref.model.lora_rank=8", "actor_rollout_ref.model.lora_alpha=16",
                                   "actor_rollout_ref.model.target_modules=[q_proj,v_proj]"]
    assert lora_overrides(load_config({"trainer": {"backend": "verl"}})) == []
    cpu = load_config({"trainer": {"backend": "verl", "verl": {"device": "cpu", "loss_agg": "token-mean"},
                                   "cpu": {"lora": {}}}})
    assert lora_overrides(cpu)[-1] == "actor_rollout_ref.model.lora.merge=true"  # the CPU replica takes full weights
    from openforge.train.verl.launch import verl_overrides

    assert "actor_rollout_ref.model.lora_rank=16" in verl_overrides(cpu, train_file="t", val_file="v",
                                                                     agent_loop_path="a", run_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"veRL.s LoRA .* has no dropout"):
        load_config({"trainer": {"backend": "verl", "cpu": {"lora": {"dropout": 0.1}}}})
    with pytest.raises(ConfigError, match="veRL's lora_alpha is an integer"):
        load_config({"trainer": {"backend": "verl", "cpu": {"lora": {"alpha": 12.5}}}})


def test_sft_trains_the_same_adapter_and_caches_only_it(tiny_llama, tmp_path):
    """The warm-start's trainer finds the adapter GRPO's trainer attached (the base stays the run's starting
    model); its cache holds the adapter alone and loads back into a fresh run's adapter."""
    from safetensors.torch import load_file

    from openforge.runner.teacher import _save_cache
    from openforge.train.sft import sft_train

    base = {n: p.detach().clone() for n, p in tiny_llama.named_parameters()}
    cfg = CPUTrainerConfig(lora=LoraConfig(**LORA))
    grpo = CPUTrainer(tiny_llama, cfg)
    before = _logits(tiny_llama)
    sample = TrainSample(input_ids=list(range(10, 30)), loss_mask=[0] * 8 + [1] * 12, old_logprobs=[0.0] * 20,
                         advantage=0.0, token_weights=[0.0] * 20)
    sft_train(tiny_llama, [sample], lr=5e-2, epochs=3, batch_size=1, trainer_config=cfg)
    assert not torch.allclose(_logits(tiny_llama), before)
    for n, p in tiny_llama.named_parameters():
        if "lora_" not in n:
            assert torch.equal(p, base[n.replace(".base_layer", "")]), n
    assert {id(p) for p in grpo.params} == {id(p) for n, p in tiny_llama.named_parameters() if "lora_" in n}

    _save_cache(tmp_path / "sft", tiny_llama, {})
    cached = load_file(str(tmp_path / "sft" / "model.safetensors"))
    assert cached and all("lora_" in k for k in cached)
    fresh = copy.deepcopy(tiny_llama)
    with torch.no_grad():
        for n, p in fresh.named_parameters():
            if "lora_" in n:
                p.zero_()
    fresh.load_state_dict(cached, strict=False)  # as warm_start loads a cached warm-start
    torch.testing.assert_close(_logits(fresh), _logits(tiny_llama), atol=0, rtol=0)


async def test_forge_trains_and_resumes_an_adapter(tiny_llama, tokenizer, tmp_path):
    """Through ``Forge.train``: LoRA checkpoints (adapter only), and a second run on a fresh copy of the
    base resumes the adapter and its optimizer from the last one."""
    from openforge.config import RunConfig
    from openforge.proxy.backends.transformers import TransformersBackend
    from openforge.runner.session import Session

    from .test_checkpoint import _Tasks
    from .test_dynamic_sampling import ScriptedRewards

    pristine = copy.deepcopy(tiny_llama)

    async def forge(model, steps, draws):
        cfg = RunConfig(run_dir=str(tmp_path / "run"), rollout={"tasks_per_step": 2, "group_size": 2},
                        trainer={"steps": steps, "keep_checkpoints": None,
                                 "cpu": {"lr": 1e-2, "micro_batch_tokens": 64, "max_resample_rounds": 0,
                                         "lora": LORA}})
        f = ScriptedRewards(cfg, draws)
        f.run_dir.mkdir(parents=True, exist_ok=True)
        f.model, f.tokenizer = model, tokenizer
        f.backend = TransformersBackend(model, tokenizer)
        f.session = await Session(f.backend, environment=_Tasks()).start()
        f.trainer = CPUTrainer(model, cfg.trainer.cpu)
        return f

    mixed = [[1.0, 0.0], [1.0, 0.0]]
    first = await forge(tiny_llama, 2, [mixed, mixed])
    await first.train()
    await first.__aexit__()
    ck = tmp_path / "run" / "checkpoints" / "step-2"
    assert (ck / "adapter_model.safetensors").is_file() and not (ck / "model.safetensors").exists()
    again = await forge(pristine, 3, [mixed])
    await again.train()
    await again.__aexit__()
    assert again.trainer.step_count == 3  # two optimizer steps resumed (trainer_state.pt), then step 3
    assert (tmp_path / "run" / "checkpoints" / "step-3" / "adapter_model.safetensors").is_file()


def test_preflight_names_what_lora_needs(lora_run, monkeypatch):
    import importlib.util

    from openforge.runner.preflight import _model

    run, _, _ = lora_run
    ck = str(run / "checkpoints" / "step-2")
    assert "its tokenizer loads" in _model(load_config({"model": {"name": ck}}))  # an adapter is a model
    with pytest.raises(ConfigError, match="is a LoRA adapter checkpoint; veRL loads a full model"):
        _model(load_config({"model": {"name": ck}, "trainer": {"backend": "verl"}}))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "peft" else real(name, *a))
    with pytest.raises(ConfigError, match=r"trainer\.cpu\.lora is set: LoRA needs peft"):
        _model(load_config({"model": {"name": str(run.parent / "base")}, "trainer": {"cpu": {"lora": {}}}}))
    with pytest.raises(ConfigError, match=r"model\.name is a LoRA adapter checkpoint: LoRA needs peft"):
        _model(load_config({"model": {"name": ck}}))


def test_verl_export_merges_the_adapter_its_merger_leaves_beside_the_base(tiny_llama, tmp_path):
    """veRL's model_merger writes a LoRA run as the base weights plus ``lora_adapter/`` (alpha 0 when its
    metadata is missing): the export merges the adapter in, with the run's alpha."""
    import json

    from peft import LoraConfig as PeftLora
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    from openforge.train.export_model import merge_verl_lora

    target = tmp_path / "merged"
    tiny_llama.save_pretrained(target)
    trained = get_peft_model(copy.deepcopy(tiny_llama), PeftLora(r=2, lora_alpha=8, target_modules="all-linear"))
    with torch.no_grad():
        for n, p in trained.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)
    trained.save_pretrained(target / "lora_adapter")
    conf = json.loads((target / "lora_adapter" / "adapter_config.json").read_text())
    (target / "lora_adapter" / "adapter_config.json").write_text(json.dumps({**conf, "lora_alpha": 0}))
    cfg = load_config({"trainer": {"backend": "verl", "cpu": {"lora": {"rank": 2, "alpha": 8}}}})

    assert merge_verl_lora(target, cfg)
    assert not (target / "lora_adapter").exists()
    plain = AutoModelForCausalLM.from_pretrained(target, local_files_only=True)
    assert not any("lora_" in n for n, _ in plain.named_parameters())
    torch.testing.assert_close(_logits(plain), _logits(trained), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(_logits(plain), _logits(tiny_llama), atol=1e-3)
    assert not merge_verl_lora(target, cfg)  # a full-weights merge: nothing to do


def test_dropout_drops_in_training_steps_only(tiny_llama):
    tr = CPUTrainer(tiny_llama, CPUTrainerConfig(lr=1e-2, lora=LoraConfig(rank=2, dropout=0.5)))
    drops = [m for n, m in tiny_llama.named_modules() if n.endswith("lora_dropout.default")]
    assert drops and all(isinstance(m, torch.nn.Dropout) for m in drops)
    seen = []
    hook = drops[0].register_forward_hook(lambda m, i, o: seen.append((m.training, torch.equal(i[0], o))))
    tr.step([_sample()])
    hook.remove()
    # dropped in every forward of the step; the one forward after it (diag/kl_step, no gradient) is not
    assert len(seen) > 1 and all(training and not same for training, same in seen[:-1])
    assert seen[-1] == (False, True)
    assert not any(m.training for m in drops)  # the back-end samples this module: no dropout there
    torch.testing.assert_close(_logits(tiny_llama), _logits(tiny_llama), atol=0, rtol=0)
