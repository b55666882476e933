"""oneDNN-packed linear weights in the transformers back-end (:mod:`openforge.proxy.backends.hf_packed`):
the forwards run on the packed copy, serve the same ids and logprobs (within float rounding) as the plain
weights, follow every weight change, never take a forward that wants gradients, and go on a pause. Off by
default: a back-end without ``packed_linears=True`` holds no copy."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from testdeps import tiny_llama

from openforge.proxy.backends.base import SamplingParams
from openforge.proxy.backends.hf_packed import PackedLinears, packing_supported
from openforge.proxy.backends.transformers import TransformersBackend

torch = pytest.importorskip("torch")

GREEDY = SamplingParams(temperature=0, max_tokens=12)
PROMPTS = [list(range(3, 40)), [5, 9, 17, 2], list(range(50, 60))]


def _tiny():
    return tiny_llama(), SimpleNamespace(eos_token_id=None)


@pytest.fixture
def tiny():
    model, tok = _tiny()
    if not packing_supported(model):
        pytest.skip("torch without oneDNN here")
    return model, tok


async def _serve(backend, prompts=PROMPTS, params=GREEDY):
    import asyncio

    return await asyncio.gather(*(backend.generate(p, params) for p in prompts))


def _linears(model) -> int:
    return len({id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Linear)})


async def test_packed_serving_equals_plain_and_runs_on_the_copy(tiny):
    model, tok = tiny
    plain = await _serve(TransformersBackend(model, tok))
    backend = TransformersBackend(model, tok, packed_linears=True)
    calls = []
    real = torch.ops.mkldnn._linear_pointwise
    # every linear of every forward went through oneDNN's kernel on a packed weight
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch.ops.mkldnn, "_linear_pointwise", lambda *a: calls.append(a[1]) or real(*a))
        packed = await _serve(backend)
    assert backend.packed is not None and backend.packed.packs == 1 and len(backend.packed) == _linears(model)
    assert calls and all(w.is_mkldnn for w in calls)
    for want, got in zip(plain, packed, strict=True):
        assert got.output_ids == want.output_ids and got.finish_reason == want.finish_reason
        assert max(abs(a - b) for a, b in zip(got.logprobs, want.logprobs)) < 1e-4


async def test_a_weight_change_is_served_at_once(tiny):
    """An in-place optimizer-like update and a ``load_state_dict`` each drop the stale copy: the next
    call is served from the new weights (a copy kept across the change would serve the old logprobs)."""
    model, tok = tiny
    backend = TransformersBackend(model, tok, prefix_cache_bytes=0, packed_linears=True)
    before = await _serve(backend)
    with torch.no_grad():
        model.lm_head.weight.mul_(3.0)  # in place: same tensor, new version
    after = await _serve(backend)
    want = await _serve(TransformersBackend(model, tok, prefix_cache_bytes=0))
    assert backend.packed.packs == 2
    for w, a, b in zip(want, after, before, strict=True):
        assert max(abs(x - y) for x, y in zip(a.logprobs, w.logprobs)) < 1e-4
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) > 1e-2  # the change did show
    other, _ = _tiny()
    with torch.no_grad():
        for p in other.parameters():
            p.mul_(0.5)
    model.load_state_dict(other.state_dict())
    loaded = await _serve(backend)
    want = await _serve(TransformersBackend(model, tok, prefix_cache_bytes=0))
    assert backend.packed.packs == 3
    for w, a in zip(want, loaded, strict=True):
        assert a.output_ids == w.output_ids
        assert max(abs(x - y) for x, y in zip(a.logprobs, w.logprobs)) < 1e-4


def test_a_forward_that_wants_gradients_runs_the_plain_weights(tiny):
    """Training through a model whose copy is active still gets every gradient (oneDNN's packed kernel has
    none)."""
    model, _ = tiny
    ids = torch.tensor([PROMPTS[0]])
    model.zero_grad()
    model(input_ids=ids).logits.sum().backward()
    want = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    packed = PackedLinears(model)
    with packed.active():
        model(input_ids=ids).logits.sum().backward()
    assert len(packed) == _linears(model)
    for n, p in model.named_parameters():
        assert p.grad is not None, n
        assert torch.allclose(p.grad, want[n], atol=1e-5), n


async def test_a_pause_drops_the_copy(tiny):
    model, tok = tiny
    backend = TransformersBackend(model, tok, packed_linears=True)
    await _serve(backend)
    assert len(backend.packed) and backend.packed.nbytes == sum(
        m.weight.numel() * 4 for m in model.modules() if isinstance(m, torch.nn.Linear))
    backend.release_caches()  # what a pause for training calls
    assert len(backend.packed) == 0 and backend.packed.nbytes == 0
    await _serve(backend)
    assert backend.packed.packs == 2


async def test_another_dtype_is_served_plain():
    model, tok = _tiny()
    model = model.to(torch.bfloat16)
    assert not packing_supported(model)
    backend = TransformersBackend(model, tok, packed_linears=True)
    out = await _serve(backend)
    assert all(len(g.output_ids) == GREEDY.max_tokens for g in out)
    assert len(backend.packed) == 0 and backend.packed.packs == 0



async def test_off_by_default(tiny):
    model, tok = tiny
    backend = TransformersBackend(model, tok)
    calls = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch.ops.mkldnn, "_linear_pointwise", lambda *a: calls.append(a))
        await _serve(backend)
    assert backend.packed is None and not calls


def test_a_linear_with_a_bias_and_any_batch_shape():
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.SiLU(), torch.nn.Linear(32, 8, bias=False)).eval()
    if not packing_supported(net):
        pytest.skip("torch without oneDNN here")
    packed = PackedLinears(net)
    for shape in ((1, 16), (3, 16), (2, 5, 16)):
        x = torch.randn(*shape)
        with torch.inference_mode():
            want = net(x)
            with packed.active():
                got = net(x)
        assert got.shape == want.shape and torch.allclose(got, want, atol=1e-5)
    assert len(packed) == 2 and packed.packs == 1
