"""The forged-evidence attack, run as its own driver process (as root, or as a normal user): a
command fault (``flaky_command`` on ``sort``) in a claw rollout; the agent tries to make it look met
without running ``sort``, then runs it. Prints one JSON report.

Usage: ``python _evidence.py BASE_DIR``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from openforge.launchers.base import SandboxSpec
from openforge.launchers.local import LocalLauncher
from openforge.plugins import make_environment

FORGE = r"""
shims=${PATH%%:*}
echo "shims at $shims"
# 1. the old evidence: a log in HOME the agent writes itself
mkdir -p "$HOME/.cache/openforge-faults/bin" && date +%s.%N >> "$HOME/.cache/openforge-faults/bin/sort.fired"
# 2. a log next to the shims
(date +%s.%N >> "$shims/sort.fired") 2>/dev/null && echo WROTE-SHIM-DIR
(echo 'exit 0' > "$shims/sort") 2>/dev/null && echo REPLACED-SHIM
# 3. the oracle's socket, asked directly; 4. a copy of the shim run from elsewhere; 5. a shell holding it
ask='import socket,sys;s=socket.socket(socket.AF_UNIX);s.connect(sys.argv[1]);s.sendall(b"sort\n");print(s.makefile().readline().strip())'
PY=$(sed -n 's/^v=\$(\([^ ]*\) .*/\1/p' "$shims/sort"); PY=${PY#\'}; PY=${PY%\'}
echo "direct: $("$PY" -c "$ask" "$shims/../oracle.sock")"
cp "$shims/sort" /tmp/sort && echo "copy: $(echo x | sh /tmp/sort 2>&1)"
echo "held: $(sh -c "exec 9<$shims/sort; \"$PY\" -c '$ask' $shims/../oracle.sock")"
"""


async def main(base: Path) -> dict:
    env = make_environment("claw", faults=[{"kind": "flaky_command", "command": "sort", "fails": 1}])
    task = env.task("issues-close")
    launcher = LocalLauncher(base_dir=base)
    sbx = await launcher.start(SandboxSpec(rollout_id="forger", task=task, proxy_url="http://127.0.0.1:9",
                                           api_key="k"))
    rep: dict = {}
    try:
        await env.setup(task, sbx)
        henv = env.harness_env(task, sbx)
        r = await sbx.exec(["sh", "-c", FORGE], env=henv, timeout_s=60)
        rep["attack"] = r.stdout + r.stderr
        rep["after_attack"] = (await env.rollout_metadata(task, sbx))["faults"]
        ran = await sbx.exec(["sh", "-c", "printf 'b\\na\\n' | sort; printf 'b\\na\\n' | sort"], env=henv,
                             timeout_s=60)
        rep["ran_stdout"], rep["ran_stderr"] = ran.stdout, ran.stderr
        rep["after_run"] = (await env.rollout_metadata(task, sbx))["faults"]
    finally:
        await env.teardown(task, sbx)
        await sbx.close()
        await launcher.aclose()
    return rep


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(Path(sys.argv[1])))), flush=True)
