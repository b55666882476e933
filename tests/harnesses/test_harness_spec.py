"""Harness spec files: a YAML/TOML file declares a CLI harness (install, argv, env, config files,
wires, final answer); the name is a path wherever a harness name goes; bad specs are refused in
the file's own keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness_helpers import AN, OA, config_ctx

from openforge.core.errors import ConfigError, HarnessNotInstalled
from openforge.harness import RolloutContext
from openforge.harnesses.spec_harness import SpecHarness
from openforge.plugins import harness_class, make_harness

SPEC = Path(__file__).resolve().parent / "data" / "minichat" / "minichat.yaml"


@pytest.fixture
def ctx(tmp_path: Path) -> RolloutContext:
    return config_ctx(tmp_path, 'say "hi"')  # a quote: the !j conversion escapes it


def write(tmp_path: Path, text: str, name: str = "h.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


BASE = """
name: demo
executable: /bin/echo
wires: [chat, messages]
wire_names: {chat: openai-completions, messages: anthropic-messages}
command: ["{exe}", "--base", "{base_url}", "--api", "{wire_name}", "{instruction}"]
env: {DEMO_KEY: "{api_key}", DEMO_HOME: "{home}"}
files: {".demo/cfg.json": '{{"url": {base_url!j}, "task": {instruction!j}}}'}
final: {jsonl: result.text, where: {type: done}}
"""


def test_the_spec_of_a_real_cli_is_a_harness(ctx):
    cls = harness_class(str(SPEC))
    assert issubclass(cls, SpecHarness) and cls.name == "minichat" and cls.wire_api == "chat"
    assert harness_class(str(SPEC)) is cls  # one class per file and content
    h = make_harness(str(SPEC))
    assert h.resolve_executable() == str(SPEC.with_name("minichat.py")) and h.version() == "1.0.0"
    cfg = json.loads(h.config_files(ctx)[".minichat/config.json"])
    assert cfg["base_url"] == OA and cfg["model"] == "pol" and "minichat" in cfg["system"]
    assert h.environment(ctx) == {"MINICHAT_API_KEY": "sk-roll"}
    argv = h.command(ctx, "/x/minichat.py")
    assert argv[1:] == ["/x/minichat.py", "--api", "chat", "--max-turns", "8", 'say "hi"']
    assert str(SPEC.parent) in h.ro_paths()  # the executable's folder: the script is visible in the sandbox
    assert make_harness(str(SPEC)).describe()["installed"] is True


def test_templates_wires_extra_args_and_final(tmp_path, ctx):
    path = write(tmp_path, BASE)
    h = make_harness(str(path), wire_api="messages", extra_args=["--fast"])
    assert h.wire_api == "messages"
    assert h.command(ctx, "/bin/echo") == ["/bin/echo", "--base", AN, "--api", "anthropic-messages", "--fast", 'say "hi"']
    assert make_harness(str(path)).command(ctx, "e")[2:5] == [OA, "--api", "openai-completions"]
    assert json.loads(h.config_files(ctx)[".demo/cfg.json"]) == {"url": AN, "task": 'say "hi"'}  # !j escapes
    assert h.environment(ctx) == {"DEMO_KEY": "sk-roll", "DEMO_HOME": str(ctx.home)}
    out = '{"type":"done","result":{"text":"early"}}\nnoise\n{"type":"log"}\n{"type":"done","result":{"text":"ok"}}\n'
    assert h.final_text(out) == "ok"
    marked = write(tmp_path, BASE.replace('"{instruction}"]', '"{extra_args}", "--", "{instruction}"]'), "m.yaml")
    assert make_harness(str(marked), extra_args=["-v"]).command(ctx, "e")[-3:] == ["-v", "--", 'say "hi"']
    with pytest.raises(ConfigError, match="wire_api must be one of chat, messages"):
        make_harness(str(path), wire_api="responses")


def test_a_spec_can_speak_the_gemini_wire(tmp_path, ctx):
    """On the gemini wire ``{base_url}`` is the proxy's Gemini root (the SDKs add ``/v1beta/…``), also
    ``{gemini_base_url}`` on every wire; the process gets it as GOOGLE_GEMINI_BASE_URL too."""
    path = write(tmp_path, BASE.replace("wires: [chat, messages]", "wires: [gemini, chat]")
                 .replace("messages: anthropic-messages}", "gemini: google-genai}")
                 .replace('DEMO_HOME: "{home}"', 'DEMO_GEMINI: "{gemini_base_url}"'))
    h = make_harness(str(path))
    assert h.wire_api == "gemini" and type(h).wire_apis == ("gemini", "chat")
    assert h.command(ctx, "e") == ["e", "--base", ctx.gemini_base_url, "--api", "google-genai", 'say "hi"']
    assert ctx.gemini_base_url == AN and json.loads(h.config_files(ctx)[".demo/cfg.json"])["url"] == AN
    assert h.environment(ctx) == {"DEMO_KEY": "sk-roll", "DEMO_GEMINI": AN}
    assert ctx.base_env()["GOOGLE_GEMINI_BASE_URL"] == AN and ctx.base_env()["GEMINI_API_KEY"] == "sk-roll"
    chat = make_harness(str(path), wire_api="chat")
    assert chat.command(ctx, "e")[2] == OA and chat.environment(ctx)["DEMO_GEMINI"] == AN
    minichat = make_harness(str(SPEC), wire_api="gemini")  # the real CLI below, on the gemini wire
    assert json.loads(minichat.config_files(ctx)[".minichat/config.json"])["base_url"] == AN
    assert minichat.command(ctx, "m")[2:4] == ["--api", "gemini"]


def test_toml_spec_is_the_same(tmp_path, ctx):
    path = write(tmp_path, 'name = "t"\nexecutable = "/bin/echo"\nwires = ["responses"]\n'
                           'command = "{exe} exec --model {model} {instruction}"\nfinal = "stdout"\n', "t.toml")
    h = make_harness(str(path))
    assert h.wire_api == "responses" and h.command(ctx, "/bin/echo") == ["/bin/echo", "exec", "--model", "pol", 'say "hi"']
    assert h.final_text("a\nb\n") == "a\nb"


@pytest.mark.parametrize(("change", "message"), [
    (("{instruction}", "{task}"), "command: unknown template field {task}"),
    (("wires: [chat, messages]", "wires: [grpc]"),
     "wires.0: Input should be 'chat', 'responses', 'messages' or 'gemini'"),
    (("executable: /bin/echo", "install: {npm: x, pypi: y, version: '1', executable: x}"), "install: give exactly one of npm or pypi"),
    (("executable: /bin/echo", "colour: red"), "colour: Extra inputs are not permitted"),
    ((".demo/cfg.json", "../escape.json"), "a file path relative to the private HOME"),
    (("{base_url!j}", "{base_url!x}"), "unknown conversion !x"),
    (("wire_names: {chat: openai-completions, messages: anthropic-messages}", "wire_names: {responses: r}"),
     "wire_names names wire(s) not in wires: responses"),
])
def test_bad_spec_is_refused_in_its_own_keys(tmp_path, change, message):
    text = BASE.replace(*change) if change[0] != "{instruction}" else BASE.replace('"{instruction}"]', '"{task}"]')
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        harness_class(str(path))
    assert any(message in p and p.startswith(str(path)) for p in e.value.problems), e.value.problems


def test_missing_or_broken_file_and_executable(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        harness_class(str(tmp_path / "nope.yaml"))
    with pytest.raises(ConfigError, match="cannot parse"):
        harness_class(str(write(tmp_path, "name: [unclosed", "b.yaml")))
    with pytest.raises(ConfigError, match="give install"):
        harness_class(str(write(tmp_path, "name: x\nwires: [chat]\ncommand: [x]\n", "c.yaml")))
    gone = write(tmp_path, BASE.replace("/bin/echo", "./not-there.sh"), "d.yaml")
    with pytest.raises(HarnessNotInstalled, match=r"not-there\.sh"):
        make_harness(str(gone)).check_installed()
    npm = write(tmp_path, BASE.replace("executable: /bin/echo", "install: {npm: '@x/cli', version: '1.2.3', executable: xcli}"),
                "e.yaml")
    h = make_harness(str(npm))
    assert h.version() == "1.2.3" and "npm install @x/cli@1.2.3" in h.install_hint
    assert make_harness(str(npm)).describe()["installed"] is False


def test_a_run_config_takes_a_spec_path(tmp_path):
    from openforge.config import load_config

    path = write(tmp_path, BASE)
    cfg = load_config({"harness": {"name": str(path), "options": {"wire_api": "messages"}}})
    assert cfg.harness.names() == [str(path)]
    with pytest.raises(ConfigError) as e:
        load_config({"harness": {"name": str(path), "options": {"max_turns": 3}}})
    assert any("harness.options.max_turns: not an option of" in p for p in e.value.problems), e.value.problems
