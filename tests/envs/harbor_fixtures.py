"""A folder of Harbor tasks written for the tests (Harbor's layout: task.toml, instruction.md,
environment/Dockerfile + build context, tests/test.sh, solution/solve.sh). Nothing reaches the network:
``RUN pip install`` installs a wheel built here into the build context.

* ``greet-wheel``: ``COPY`` a wheel + ``WORKDIR`` + ``ENV`` + ``RUN pip install --no-index`` it; the agent
  writes ``tinypkg.greet()`` to ``/app/out.txt``; ``test.sh`` compares with ``/tests/expected.txt`` and
  writes ``reward.txt``; ``solve.sh`` runs a helper from ``/solution``;
* ``sum-files``: pure file set-up (``COPY`` + ``RUN mkdir/cp``) in ``WORKDIR /work/project``; ``test.sh``
  writes ``reward.json`` with named rewards;
* ``silent-verifier``: a ``test.sh`` that never writes a reward;
* ``cuda-base``: a base image the host lacks.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

PY = f"python:{sys.version_info.major}.{sys.version_info.minor}-slim"


def _write(root: Path, files: dict[str, str | bytes]) -> None:
    for rel, body in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(body if isinstance(body, bytes) else body.encode())
        if rel.endswith(".sh"):
            p.chmod(0o755)


def _wheel() -> bytes:
    """A pure-Python wheel (``tinypkg`` 0.1) built by hand: pip installs it offline."""
    import io

    buf = io.BytesIO()
    files = {
        "tinypkg/__init__.py": "import os\n\ndef greet():\n    return os.environ.get('GREETING', '?') + ' from tinypkg'\n",
        "tinypkg-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: tinypkg\nVersion: 0.1\n",
        "tinypkg-0.1.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{k},,\n" for k in files) + "tinypkg-0.1.dist-info/RECORD,,\n"
    with zipfile.ZipFile(buf, "w") as z:
        for k, v in files.items():
            z.writestr(k, v)
        z.writestr("tinypkg-0.1.dist-info/RECORD", record)
    return buf.getvalue()


GREET_TEST = """#!/bin/bash
# Harbor's contract: write the score to /logs/verifier/reward.txt
want=$(cat /tests/expected.txt)
got=$(python3 -c 'import sys; print(open("/app/out.txt").read().strip())' 2>/dev/null)
check=$(python3 -c 'import tinypkg; print(tinypkg.greet())')
if [ "$got" = "$want" ] && [ "$check" = "$want" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""

SUM_TEST = """#!/bin/bash
cd /work/project
total=$(cat total.txt 2>/dev/null | tr -d '[:space:]')
python3 - "$total" <<'EOF'
import json, sys
got = sys.argv[1]
correct = 1.0 if got == "60" else 0.0
fmt = 1.0 if got.isdigit() else 0.0
json.dump({"reward": correct, "correct": correct, "format": fmt}, open("/logs/verifier/reward.json", "w"))
EOF
"""


def make_harbor_folder(root: Path, *, unsupported: bool = True, silent: bool = True) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    _write(root / "greet-wheel", {
        "task.toml": 'version = "1.0"\n[metadata]\ncategory = "python"\ndifficulty = "easy"\n'
                     "[agent]\ntimeout_sec = 120.0\n[verifier]\ntimeout_sec = 60.0\n"
                     '[environment]\nallow_internet = false\ncpus = 1\nmemory_mb = 1024\n',
        "instruction.md": "<!-- canary GUID 1234 -->\nWrite the value of `tinypkg.greet()` (the package is "
                          "installed) to /app/out.txt.\n",
        "environment/Dockerfile": f"FROM {PY}\nWORKDIR /app\nENV GREETING=hello\n"
                                  "COPY tinypkg-0.1-py3-none-any.whl wheels/\n"
                                  "RUN pip install --no-index --no-deps wheels/tinypkg-0.1-py3-none-any.whl\n"
                                  'CMD ["bash"]\n',
        "environment/tinypkg-0.1-py3-none-any.whl": _wheel(),
        "tests/test.sh": GREET_TEST,
        "tests/expected.txt": "hello from tinypkg\n",
        "solution/solve.sh": "#!/bin/bash\nset -e\npython3 /solution/write.py\n",
        "solution/write.py": "import tinypkg\nopen('out.txt', 'w').write(tinypkg.greet() + '\\n')\n",
    })
    _write(root / "sum-files", {
        "task.toml": '[verifier]\ntimeout_sec = 60\n[environment]\nallow_internet = false\n',
        "instruction.md": "Add up the numbers in data/numbers.txt (one per line) and write the total to total.txt.\n",
        "environment/Dockerfile": f"FROM {PY}\nWORKDIR /work/project\nCOPY numbers.txt ./\n"
                                  "RUN mkdir -p data && mv numbers.txt data/ && chmod a-w data/numbers.txt\n",
        "environment/numbers.txt": "10\n20\n30\n",
        "tests/test.sh": SUM_TEST,
        "solution/solve.sh": "#!/bin/bash\npython3 -c 'print(sum(int(x) for x in open(\"data/numbers.txt\")))' > total.txt\n",
    })
    if silent:
        _write(root / "silent-verifier", {
            "task.toml": "[verifier]\ntimeout_sec = 30\n",
            "instruction.md": "Create a file called done.txt.\n",
            "environment/Dockerfile": f"FROM {PY}\nWORKDIR /app\n",
            "tests/test.sh": "#!/bin/bash\necho 'checking...'\ntest -f /app/done.txt && echo passed\n",
            "solution/solve.sh": "#!/bin/bash\ntouch done.txt\n",
        })
    if unsupported:
        _write(root / "cuda-base", {
            "task.toml": "[environment]\ngpus = 0\n",
            "instruction.md": "Train the model.\n",
            "environment/Dockerfile": "FROM nvidia/cuda:12.4.0-devel-ubuntu22.04\nWORKDIR /app\n",
            "tests/test.sh": "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
        })
    return root
