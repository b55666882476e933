"""Logprobs of segments that share a prompt prefix (``openforge.train.logprobs``): the prefix runs
through the decoder once per micro-batch, and the result — values and gradients — is the plain
computation's, on a real transformers llama (tiny, random)."""

from __future__ import annotations

import copy

import pytest

from openforge.train.cpu import CPUTrainer, CPUTrainerConfig
from openforge.train.grpo import TrainSample
from openforge.train.logprobs import MIN_SHARED_PREFIX, pack_microbatches, shared_prefix, token_logprobs

torch = pytest.importorskip("torch")

P = 40  # a harness's system prompt, in miniature


def _batch(lens: list[int], seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    prefix = torch.randint(2, 96, (P,), generator=g)
    T = P + max(lens)
    ids = torch.zeros(len(lens), T, dtype=torch.long)
    attn = torch.zeros_like(ids)
    pos = torch.zeros(len(lens), T - 1, dtype=torch.bool)
    for i, n in enumerate(lens):
        ids[i, :P] = prefix
        ids[i, P:P + n] = torch.randint(2, 96, (n,), generator=g)
        attn[i, :P + n] = 1
        pos[i, P - 1 + n // 3:P - 1 + n] = True  # the tail of each row is "generated", e.g. its first token
    pos[0, P - 1] = True  # row 0 trains its very first token after the prefix
    return ids, attn, pos


def test_a_shared_prefix_gives_the_plain_logprobs_and_gradients(tiny_llama):
    ids, attn, pos = _batch([12, 20, 7])
    plain = token_logprobs(tiny_llama, ids, attn, temperature=0.8, chunk=8)
    (plain * pos).sum().backward()
    want = [p.grad.clone() for p in tiny_llama.parameters()]
    tiny_llama.zero_grad(set_to_none=True)
    calls: list[int] = []
    hook = tiny_llama.get_decoder().embed_tokens.register_forward_hook(lambda m, i, o: calls.append(i[0].numel()))
    got = token_logprobs(tiny_llama, ids, attn, temperature=0.8, chunk=8, positions=pos, prefix=P)
    hook.remove()
    assert calls == [P + 12 + 20 + 7]  # one packed sequence: the prefix once, then each row's own tokens
    assert torch.allclose(got[pos], plain[pos].detach(), atol=1e-5) and not got[~pos].any()
    got.sum().backward()
    for a, b in zip(want, (p.grad for p in tiny_llama.parameters()), strict=True):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4)


def test_a_prefix_reaching_a_trained_position_is_refused(tiny_llama):
    ids, attn, pos = _batch([12, 20])
    pos[1, P - 3] = True
    with pytest.raises(ValueError, match="inside the shared prefix"):
        token_logprobs(tiny_llama, ids, attn, positions=pos, prefix=P)


def test_shared_prefix_stops_at_the_first_trained_token():
    a, b = list(range(100)), [*range(60), 7, 8, 9]
    assert shared_prefix([a, b], [80, 80]) == 60
    assert shared_prefix([a, b], [80, 50]) == 50  # b trains token 50: its logprob needs position 49
    assert shared_prefix([a, b], [80, MIN_SHARED_PREFIX - 1]) == 0  # too short to be worth it
    assert shared_prefix([a], [100]) == 0


def test_the_packer_counts_a_shared_prefix_once():
    seqs = [[*range(80), 100 + i, *range(19)] for i in range(4)]  # 4 × 100 tokens, 80 shared
    assert pack_microbatches([100] * 4, 200) == [[0, 1], [2, 3]]  # 2 × 100 padded tokens each
    assert pack_microbatches([100] * 4, 200, seqs=seqs, limits=[90] * 4) == [[0, 1, 2, 3]]  # 80 + 4 × 20
    assert pack_microbatches([100] * 4, 200, seqs=seqs, limits=[10] * 4) == [[0, 1], [2, 3]]  # trained from 10


def test_the_packer_keeps_segments_of_one_harness_together():
    """A multi-harness SFT batch mixes two system prompts; packed by length alone, no micro-batch would
    share one (the prompts differ from their first tokens)."""
    a = [[*range(100, 180), 1000 + i, *range(9 + i)] for i in range(3)]  # harness A: 80-token prompt
    b = [[*range(200, 260), 2000 + i, *range(24 + 10 * i)] for i in range(3)]  # harness B: 60-token prompt
    seqs = [a[0], b[0], a[1], b[1], a[2], b[2]]  # interleaved, as a shuffled batch is
    lengths = [len(s) for s in seqs]
    batches = pack_microbatches(lengths, 300, seqs=seqs, limits=[60] * 6)
    assert sorted(map(sorted, batches)) == [[0, 2, 4], [1, 3, 5]]
    assert all(shared_prefix([seqs[i] for i in bt], [60] * 3) == 60 for bt in batches)


def _samples(n: int) -> list[TrainSample]:
    g = torch.Generator().manual_seed(5)
    prompt = torch.randint(2, 96, (P + 8,), generator=g).tolist()
    out = []
    for i in range(n):
        ans = torch.randint(2, 96, (6 + 3 * i,), generator=g).tolist()
        mask = [0] * len(prompt) + [1] * len(ans)
        out.append(TrainSample(input_ids=prompt + ans, loss_mask=mask, old_logprobs=[-4.0 * m for m in mask],
                               advantage=1.0 if i % 2 else -1.0, token_weights=[m / 40 for m in mask]))
    return out


def test_a_trainer_step_with_and_without_prefix_sharing_is_the_same(tiny_llama):
    """The same accumulated gradient plain, with the prefix shared, and with the prefix shared under
    per-layer activation checkpointing (the packed sequence needs no key/value cache, so the two combine:
    the main job's setting)."""
    samples = _samples(4)
    grads, rows = [], []
    for share, ckpt in ((False, False), (True, False), (True, True)):
        model = copy.deepcopy(tiny_llama)
        seen: list[int] = []
        model.get_decoder().embed_tokens.register_forward_hook(lambda m, i, o, seen=seen: seen.append(i[0].numel()))
        tr = CPUTrainer(model, CPUTrainerConfig(lr=1e-3, grad_clip=1e9, kl_coef=0.1, share_prefix=share,
                                                gradient_checkpointing=ckpt))
        # capture the accumulated gradient only (at the optimizer step: the trainer drops it after)
        tr.optimizer.step = lambda tr=tr: grads.append(torch.cat([p.grad.flatten() for p in tr.params]))
        m = tr.step(samples)
        rows.append(sum(seen))
        assert m["behaviour_logprob_gap"] > 0
    assert torch.allclose(grads[0], grads[1], atol=1e-6, rtol=1e-4)
    assert torch.allclose(grads[0], grads[2], atol=1e-6, rtol=1e-4)
    assert rows[1] < rows[0]  # the shared path really ran fewer tokens through the decoder
    assert rows[2] == rows[1]  # and checkpointing keeps the packed sequences (its recomputation: test_cpu_trainer.py)
