import subprocess
import sys

import openforge


def test_version_cli():
    out = subprocess.run([sys.executable, "-m", "openforge.cli.main", "--version"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"openforge {openforge.__version__}"
