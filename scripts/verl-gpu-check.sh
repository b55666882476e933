#!/usr/bin/env bash
# veRL on one GPU: the checks the CPU run (tests/train/test_verl_cpu.py) cannot make. One command,
# under 10 minutes on one H200, no network: see docs/verl.md, "What only a GPU checks".
#
#   bash scripts/verl-gpu-check.sh [OUT_DIR]
#
# Runs the `verl` recipe preset unchanged apart from size settings: veRL 0.9.1's main_ppo, V1 sync
# trainer, FSDP over NCCL on CUDA, the real vLLM rollout (vLLMHttpServer in-process, CUDA-IPC weight
# sync, sleep/wake), openforge's agent loop + proxy + react harness in the local sandbox, claw tasks,
# 2 GRPO steps, a checkpoint, `forge export model`. The model is a randomly initialised small Llama
# with SmolLM2's tokenizer (no download), so rewards are ~0: this checks plumbing and numerics, not
# learning (learning on CPU: the heavy test).
#
# Needs a Python with openforge's verl extra and vLLM (pip install -e '.[verl]' 'vllm==0.24.0'), chosen
# with PYTHON=... (default: python3). A machine without them stops here with the reason. SmolLM2's
# tokenizer files come from TOKENIZER_DIR (default: .gpu-check/tokenizer, written by
# `bash scripts/verl-gpu-check.sh --prepare` on a machine that has openforge's model cache).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
TOK=${TOKENIZER_DIR:-.gpu-check/tokenizer}

if [[ "${1:-}" == "--prepare" ]]; then  # here, not on the device: ~3.5 MB of tokenizer files to carry
  mkdir -p "$TOK"
  "$PY" -c "from openforge.proxy.backends.hf_loading import load_tokenizer; load_tokenizer('smollm2-135m').save_pretrained('$TOK')"
  ls -la "$TOK"; exit 0
fi
OUT=${1:-${OUT:-/tmp/verl-gpu-check}}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HYDRA_FULL_ERROR=1 TOKENIZERS_PARALLELISM=false

missing=$("$PY" - <<'EOF'
import importlib.util as u
need = {"torch": "torch", "verl": "verl==0.9.1", "vllm": "vllm==0.24.0", "ray": "ray", "transfer_queue": "TransferQueue"}
print(" ".join(p for m, p in need.items() if u.find_spec(m) is None))
EOF
)
if [[ -n "$missing" ]]; then
  echo "verl-gpu-check: this Python ($PY) lacks: $missing. Install openforge's verl extra and vLLM" \
       "(pip install -e '.[verl]' 'vllm==0.24.0'); their wheels (ray alone is 79 MB, vllm ~400 MB) do not fit" \
       "a 64 MiB carry onto a bare machine." >&2
  exit 2
fi
"$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print('GPU:', torch.cuda.get_device_name(0))"
[[ -f "$TOK/tokenizer.json" ]] || { echo "verl-gpu-check: no tokenizer in $TOK (run --prepare where the model cache is)" >&2; exit 2; }

# 1. a randomly initialised small Llama (~30M parameters) with SmolLM2's tokenizer
"$PY" - "$TOK" "$OUT/model" <<'EOF'
import shutil, sys
import torch, transformers
tok_dir, out = sys.argv[1], sys.argv[2]
tok = transformers.AutoTokenizer.from_pretrained(tok_dir)
torch.manual_seed(0)
cfg = transformers.LlamaConfig(vocab_size=len(tok), hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                               tie_word_embeddings=True, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                               bos_token_id=tok.bos_token_id)
transformers.LlamaForCausalLM(cfg).save_pretrained(out)
tok.save_pretrained(out)
print("model:", out)
EOF

# 2. main_ppo: the verl preset, size settings only
START=$SECONDS
set +e
timeout 480 "$PY" -m openforge.cli.main recipe claw-grpo --preset verl -q \
  "model.name=$OUT/model" trainer.verl.n_gpus_per_node=1 trainer.verl.agent_workers=2 \
  trainer.verl.train_batch_size=4 trainer.verl.ppo_mini_batch_size=4 rollout.group_size=4 \
  trainer.verl.max_prompt_length=2048 trainer.verl.max_response_length=2048 trainer.verl.max_model_len=4096 \
  trainer.verl.ppo_max_token_len_per_gpu=16384 trainer.verl.gpu_memory_utilization=0.3 \
  trainer.verl.episode_timeout_s=240 trainer.steps=2 rollout.max_tokens=64 \
  harness.per_harness.react.max_turns=2 harness.per_harness.react.max_tokens=64 env.subset=easy \
  "trainer.verl.extra_overrides=[trainer.save_freq=1,trainer.test_freq=-1]" \
  "run_dir=$OUT/run" > "$OUT/main_ppo.log" 2>&1
rc=$?
set -e
echo "main_ppo rc=$rc in $((SECONDS - START))s (log: $OUT/main_ppo.log)"
if [[ $rc -ne 0 ]]; then grep -E "Error|Traceback" "$OUT/main_ppo.log" | head -40; tail -40 "$OUT/main_ppo.log"; exit 1; fi

# 3. what the run must show
"$PY" -m openforge.cli.main export model "$OUT/run" --out "$OUT/exported" > "$OUT/export.log" 2>&1 \
  || { tail -30 "$OUT/export.log"; exit 1; }
"$PY" - "$OUT" <<'EOF'
import json, re, sys
from pathlib import Path
out = Path(sys.argv[1])
steps = {}
for line in (out / "main_ppo.log").read_text(errors="replace").splitlines():
    m = re.search(r"step:(\d+) - (.*)", line)
    if m:
        for pair in m.group(2).split(" - "):
            k, _, v = pair.rpartition(":")
            n = re.fullmatch(r"(?:np\.\w+\()?([-+0-9.eE]+|nan|inf)\)?", v.strip())
            if k and n:
                steps.setdefault(int(m.group(1)), {})[k] = float(n.group(1))
assert sorted(steps)[:2] == [1, 2], f"veRL logged steps {sorted(steps)}"
for s in (1, 2):
    m = steps[s]
    assert "critic/score/mean" in m and "critic/advantages/max" in m, sorted(m)
    # vLLM's processed logprobs vs the FSDP actor's on the same tokens (bf16 on CUDA): the rollout/train gap
    gap = {k: v for k, v in m.items() if "rollout_probs_diff" in k or "rollout_corr" in k and "kl" in k}
    print(f"step {s}: score {m['critic/score/mean']:.3f}, gap metrics {json.dumps(gap)}")
ck = sorted((out / "run" / "checkpoints").glob("global_step_*"))
assert [p.name for p in ck][-2:] == ["global_step_1", "global_step_2"], ck
import transformers
transformers.AutoModelForCausalLM.from_pretrained(out / "exported")
print("verl-gpu-check: OK (2 GRPO steps, vLLM rollout, checkpoint merged)")
EOF
