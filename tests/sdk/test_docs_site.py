"""Every code block of the README and of the docs site is tested, or says explicitly why not.

``docs/sdk.md`` has its own markers and test (``test_docs.py``); the generated reference pages are
checked by ``tests/core/test_reference_docs.py``. Everywhere else a block is preceded by
``<!-- docs-test: KIND [ARG] -->``:

- ``run``: a Python block, executed (from a folder holding ``examples/``, ``my-tasks/`` and ``turns.yaml``);
- ``proxy``: a Python block run against ``forge proxy serve --backend scripted:...`` started by the test (on a
  free port in place of the block's 8787, with ``OPENFORGE_ADMIN_TOKEN`` set);
- ``heavy``: a Python block, executed by a ``heavy`` test (the README's training example; the default suite
  runs it as a dry run and its classes through real rollouts);
- ``cli``: ``forge`` command lines, checked against the real CLI without running them: each subcommand
  exists, each option is one of that command's, each ``key=value`` of ``forge recipe`` is a config key;
- ``toml`` / ``json``: parsed;
- ``text``: a diagram or a file layout, not code;
- ``skip REASON``: not runnable here, and why (an install, a GPU cluster, a server).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from testdeps import missing

REPO = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"(?:^[ ]*<!-- docs-test: (?P<kind>\w+)(?: (?P<arg>[^\n]*?))? -->\n)?^(?P<indent>[ ]*)```(?P<lang>\w*)\n"
                   r"(?P<body>.*?)^(?P=indent)```$", re.S | re.M)
KINDS = {"run", "proxy", "heavy", "cli", "toml", "json", "text", "skip"}
OWN_TESTS = {"docs/sdk.md"}  # tests/sdk/test_docs.py
GENERATED = {"docs/reference/cli.md", "docs/reference/config.md", "docs/reference/api.md"}


def pages() -> list[str]:
    found = ["README.md", "CONTRIBUTING.md", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").rglob("*.md"))]
    return [p for p in found if p not in OWN_TESTS | GENERATED and (REPO / p).is_file()]


def blocks(kind: str | None = None) -> list[dict]:
    out = []
    for page in pages():
        for m in FENCE.finditer((REPO / page).read_text(encoding="utf-8")):
            b = {**m.groupdict(), "page": page}
            if kind is None or b["kind"] == kind:
                out.append(b)
    return out


def test_every_block_says_how_it_is_tested():
    found = blocks()
    assert len(found) >= 25, [b["page"] for b in found]
    unmarked = [f"{b['page']}: {b['body'][:50]!r}" for b in found if b["kind"] not in KINDS]
    assert unmarked == [], f"code blocks without a <!-- docs-test: KIND --> marker (see this test's docstring): {unmarked}"
    no_reason = [f"{b['page']}: {b['body'][:50]!r}" for b in found if b["kind"] == "skip" and not (b["arg"] or "").strip()]
    assert no_reason == [], f"a skipped block must say why: {no_reason}"


# -- cli blocks ----------------------------------------------------------------------------------------


def _forge_lines(body: str) -> list[list[str]]:
    """The ``forge`` command lines of a shell block, as argv (continuations joined, comments dropped)."""
    text = body.replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        for part in line.split("|"):
            try:
                argv = shlex.split(part, comments=True)
            except ValueError:
                argv = part.split()
            if argv[:1] == ["forge"]:
                out.append([a.strip("[]") for a in argv if a.strip("[]")])
    return out


def _config_key_ok(key: str, keys: set[str]) -> bool:
    free = ("env.options.", "harness.options.", "harness.per_harness.", "launcher.options.")
    return key in keys or key.startswith(free)


def check_forge_line(argv: list[str]) -> list[str]:
    """What in one ``forge`` command line the CLI would not accept (empty: all of it exists)."""
    import typer.main

    from openforge.cli.main import app
    from openforge.devtools.refdocs import config_keys

    cmd, rest, path = typer.main.get_command(app), argv[1:], ["forge"]
    while hasattr(cmd, "commands") and rest and not rest[0].startswith("-"):
        if rest[0] not in cmd.commands:
            return [f"{' '.join(path)} has no command {rest[0]!r}"]
        cmd, path, rest = cmd.commands[rest[0]], [*path, rest[0]], rest[1:]
    if hasattr(cmd, "commands"):
        return [] if {"--help", "--version"} & set(rest) else [f"{' '.join(path)} needs a command"]
    opts = {o for p in cmd.params for o in (*p.opts, *getattr(p, "secondary_opts", []))} | {"--help"}
    problems = [f"{' '.join(path)}: no option {a.split('=')[0]}" for a in rest
                if a.startswith("-") and a != "-" and a.split("=")[0] not in opts]
    if path[:2] == ["forge", "recipe"]:
        keys = {k["key"] for k in config_keys()}
        problems += [f"{' '.join(path)}: no config key {a.split('=')[0]}" for a in rest
                     if re.match(r"^[a-z_]+(\.[a-z_0-9-]+)+=", a) and not _config_key_ok(a.split("=")[0], keys)]
    return problems


def test_cli_blocks_match_the_cli():
    cli = blocks("cli")
    assert len(cli) >= 8
    problems = []
    for b in cli:
        lines = _forge_lines(b["body"])
        if not lines:
            problems.append(f"{b['page']}: a cli block without a forge command: {b['body'][:60]!r}")
        problems += [f"{b['page']}: {p}  ({' '.join(argv)[:80]})" for argv in lines for p in check_forge_line(argv)]
    assert problems == [], problems


@pytest.mark.parametrize("argv, wrong", [
    ("forge rollout --harnes react", "no option --harnes"),
    ("forge evaluate -H react", "no command 'evaluate'"),
    ("forge recipe claw-grpo rollout.group_sise=4", "no config key rollout.group_sise"),
])
def test_cli_check_catches_what_the_cli_refuses(argv, wrong):
    assert any(wrong in p for p in check_forge_line(argv.split())), check_forge_line(argv.split())


# -- toml / json blocks ---------------------------------------------------------------------------------


def test_toml_and_json_blocks_parse():
    tomllib = pytest.importorskip("tomllib")
    found = blocks("toml") + blocks("json")
    assert len(found) >= 3
    for b in found:
        if b["kind"] == "toml":
            tomllib.loads(b["body"])
        else:
            json.loads(b["body"])


# -- run blocks -----------------------------------------------------------------------------------------


@pytest.fixture
def user_dir(tmp_path):
    """A folder like the repository root for the docs' code: ``examples/``, a task folder ``my-tasks/``
    and a scripted policy ``turns.yaml``."""
    (tmp_path / "examples").symlink_to(REPO / "examples")
    (tmp_path / "my-tasks").symlink_to(REPO / "examples" / "tasks")
    (tmp_path / "turns.yaml").write_text("turns:\n  - shell: echo hi\n  - text: done\n")
    return tmp_path


def _python(code: str, cwd: Path, timeout: float) -> str:
    script = cwd / "block.py"
    script.write_text(code)
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(Path.home()), "NO_COLOR": "1"}
    r = subprocess.run([sys.executable, str(script)], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    return r.stdout


@pytest.mark.timeout(300)
def test_run_blocks_run(user_dir):
    runs = blocks("run")
    assert runs, "no run blocks"
    for b in runs:
        _python(b["body"], user_dir, 240)


@pytest.mark.timeout(300)
def test_proxy_blocks_run_against_forge_proxy_serve(user_dir):
    """The admin-API example, as a user runs it: ``forge proxy serve`` in one process, the block in another."""
    import socket
    import time

    (block,) = blocks("proxy")
    (user_dir / "policy.yaml").write_text("turns:\n  - text: Hello from the policy\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(Path.home()),
           "OPENFORGE_ADMIN_TOKEN": "docs-test-token"}
    serve = subprocess.Popen([sys.executable, "-m", "openforge.cli.main", "proxy", "serve", "--backend",
                              "scripted:policy.yaml", "--port", str(port)], cwd=user_dir, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and serve.poll() is None:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        assert serve.poll() is None, serve.stdout.read()
        code = block["body"].replace("8787", str(port))
        out = _python(f"import os\nos.environ['OPENFORGE_ADMIN_TOKEN'] = 'docs-test-token'\n{code}", user_dir, 120)
    finally:
        serve.terminate()
        serve.wait(30)
    lines = out.strip().splitlines()
    assert lines[0] == "Hello from the policy", out
    assert lines[-1].startswith("success [") and lines[-1] != "success []", out


# -- the README and CONTRIBUTING.md (outside the site) ------------------------------------------------------


@pytest.mark.parametrize("page", ["README.md", "CONTRIBUTING.md"])
def test_relative_links_resolve(page):
    text = (REPO / page).read_text()
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    assert links
    broken = [t for t in links if "://" not in t and not (REPO / t).exists()]
    assert broken == [], f"{page} links to files that do not exist: {broken}"


def test_readme_harness_matrix_is_the_builtin_harnesses():
    from openforge.plugins import HARNESSES

    section = (REPO / "README.md").read_text().split("## Harnesses", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `([\w-]+)`", section, re.M))
    builtin = {n for n in HARNESSES.names() if HARNESSES.origin(n) == "built-in"}
    assert listed == builtin, f"the README lists {sorted(listed)}, the built-in harnesses are {sorted(builtin)}"


# -- the README's example ---------------------------------------------------------------------------------


def _readme_example() -> str:
    (heavy,) = [b for b in blocks("heavy") if b["page"] == "README.md"]
    return heavy["body"]


def test_readme_example_is_short_and_uses_openforge_run():
    code = _readme_example()
    assert "openforge.run(" in code and "class Sums(Environment)" in code and "class OneShot(Harness)" in code
    assert len((REPO / "README.md").read_text().splitlines()) <= 200


ROLLOUTS = '''
import asyncio
from openforge import Session
from openforge.launchers.local import LocalLauncher
from openforge.proxy.backends.scripted import ScriptedBackend


async def rollout(command):
    policy = ScriptedBackend({"turns": [{"shell": command}, {"text": "done"}]})
    async with Session(policy, environment=Sums(), harness=OneShot, launcher=LocalLauncher(),
                       store="runs/readme/store.db") as session:
        traj = await session.rollout(Sums().task("sum-2-5"))
    return traj.status.value, traj.reward, traj.harness


print(asyncio.run(rollout("echo 7 > answer.txt")), asyncio.run(rollout("echo 8 > answer.txt")))
'''


@pytest.mark.timeout(300)
def test_readme_example_dry_run_and_its_classes_roll_out(tmp_path):
    """The README's classes, as written, through the real proxy, sandbox and verifier (a scripted policy
    in place of the model): the right answer succeeds, a wrong one is the policy's failure; and the
    ``openforge.run`` call, as a dry run, passes every check a real run makes first."""
    code = _readme_example()
    run_call = re.search(r"^summary = openforge\.run\(.*$", code, re.M)
    assert run_call, "the README's example no longer ends with summary = openforge.run(...)"
    classes = code[:run_call.start()]
    out = _python(classes + ROLLOUTS, tmp_path, 240)
    assert out.strip() == "('success', 1.0, 'one-shot') ('policy_failure', 0.0, 'one-shot')", out
    dry = classes + run_call[0].replace("openforge.run(", "openforge.run(dry_run=True, ") + "\nprint(summary['checks'])\n"
    checks = _python(dry, tmp_path, 240)
    assert "harness: one-shot installed" in checks and "2 task(s)" in checks, checks


@pytest.mark.heavy(minutes=4)
@pytest.mark.timeout(1800)
def test_readme_example_trains(tmp_path):
    """The README's example verbatim: an SFT warm-start and one GRPO step on SmolLM2 through its harness."""
    out = _python(_readme_example(), tmp_path, 1700)
    run_dir = Path(out.strip().splitlines()[-1].split()[0])
    summary = json.loads((run_dir / "summary.json").read_text())
    assert len(summary["steps"]) == 1, summary


# -- the site's link check (scripts/test.sh builds the site itself: mkdocs build --strict) --------------------------------------------------------------------------------------


def _mkdocs(root: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(root / "mkdocs.yml"),
                           "-d", str(out)], cwd=root, capture_output=True, text=True, timeout=300)


@pytest.fixture
def mkdocs_installed():
    for module in ("mkdocs", "material", "mkdocstrings_handlers.python"):
        try:
            __import__(module)
        except ImportError:
            missing(f"{module} is not installed (pip install -e '.[docs]')")


@pytest.mark.timeout(300)
def test_links_to_repository_files_are_checked(mkdocs_installed, tmp_path):
    """The hook (scripts/mkdocs_hooks.py): a page may link to a file of the repository outside docs/ (MkDocs
    alone refuses that under --strict), but a link to one that does not exist breaks the strict build."""
    site = tmp_path / "repo"
    (site / "docs").mkdir(parents=True)
    (site / "scripts").mkdir()
    (site / "scripts" / "mkdocs_hooks.py").write_text((REPO / "scripts" / "mkdocs_hooks.py").read_text())
    (site / "examples").mkdir()
    (site / "examples" / "real.py").write_text("")
    (site / "mkdocs.yml").write_text("site_name: t\nhooks: [scripts/mkdocs_hooks.py]\n"
                                     "validation: {unrecognized_links: warn}\n")
    (site / "docs" / "index.md").write_text("[a file](../examples/real.py), [a folder](../examples)\n")
    r = _mkdocs(site, tmp_path / "out")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "a file (<code>examples/real.py</code>)" in (tmp_path / "out" / "index.html").read_text()
    (site / "docs" / "index.md").write_text("[gone](../examples/nothing.py)\n")
    r = _mkdocs(site, tmp_path / "out")
    assert r.returncode != 0 and "examples/nothing.py" in r.stdout + r.stderr, r.stdout + r.stderr
