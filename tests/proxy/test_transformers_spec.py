"""``transformers:SPEC`` after the loading/serving split: a local HF directory loads (fp32 unless a
dtype is asked, eval mode) and serves exact logprobs; the SmolLM2 alias loads from the wheel's GGUF
cache; neither module imports torch until a model is loaded."""

from __future__ import annotations

import subprocess
import sys

import pytest

from openforge.proxy.backends import parse_backend_spec
from openforge.proxy.backends.base import SamplingParams


@pytest.fixture
def tiny_dir(tmp_path):
    """A tiny random llama and SmolLM2's tokenizer saved as a local HF model directory."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from testdeps import smollm2_tokenizer

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                   eos_token_id=1)
    transformers.LlamaForCausalLM(cfg).save_pretrained(tmp_path)
    smollm2_tokenizer().save_pretrained(tmp_path)
    return tmp_path


async def test_local_dir_spec_loads_fp32_and_serves_exact_logprobs(tiny_dir):
    import torch

    from openforge.proxy.backends.transformers import TransformersBackend

    backend = parse_backend_spec(f"transformers:{tiny_dir}")
    assert isinstance(backend, TransformersBackend) and backend.describe() == str(tiny_dir)
    assert not backend.model.training and next(backend.model.parameters()).dtype == torch.float32
    assert backend.max_context == 64 and backend.tokenizer.eos_token == "<|im_end|>"
    gen = await backend.generate([5, 6, 7], SamplingParams(temperature=0.7, max_tokens=4, seed=3))
    assert len(gen.output_ids) == len(gen.logprobs) >= 1
    ids = torch.tensor([[5, 6, 7, *gen.output_ids]])
    with torch.inference_mode():
        logits = backend.model(input_ids=ids).logits[0, 2:-1].float()
    want = torch.log_softmax(logits / 0.7, -1)[torch.arange(len(gen.output_ids)), torch.tensor(gen.output_ids)]
    assert max(abs(a - b) for a, b in zip(want.tolist(), gen.logprobs)) < 1e-4


def test_load_model_takes_the_dtype_asked(tiny_dir):
    import torch

    from openforge.proxy.backends.hf_loading import load_model

    model, tok = load_model(str(tiny_dir), dtype=torch.bfloat16)
    assert next(model.parameters()).dtype == torch.bfloat16 and not model.training and tok is not None


@pytest.mark.slow
def test_smollm2_alias_spec_loads_the_cached_gguf_model():
    from testdeps import smollm2_tokenizer

    smollm2_tokenizer()  # skips (fails in CI) when the model's packages are missing
    import torch

    backend = parse_backend_spec("transformers:smollm2-135m")
    assert backend.describe() == "smollm2-135m"
    assert next(backend.model.parameters()).dtype == torch.float32 and not backend.model.training
    assert backend.tokenizer.eos_token == "<|im_end|>" and backend.max_context == 8192


def test_loading_and_serving_modules_import_no_torch():
    code = ("import sys, openforge.proxy.backends.transformers, openforge.proxy.backends.hf_loading; "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
