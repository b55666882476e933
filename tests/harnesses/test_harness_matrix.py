"""The harness matrix in docs/harnesses.md is generated from the conformance notes (shipped ones and
the tests' spec-file harnesses) and the CI training tests, and is current."""

from __future__ import annotations

from pathlib import Path

from openforge.harnesses.matrix import (
    BEGIN,
    END,
    generate,
    matrix_rows,
    render_matrix,
    trained_in_ci,
    update_doc,
)
from openforge.harnesses.notes import HarnessNotes

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "harnesses.md"


def test_the_docs_matrix_is_current():
    doc = DOC.read_text()
    assert update_doc(doc, generate(ROOT / "tests")) == doc, (
        "docs/harnesses.md's harness matrix is stale: forge harness matrix --write docs/harnesses.md")
    table = doc.split(BEGIN, 1)[1].split(END, 1)[0]
    for name in ("codex", "claude-code", "pi", "openclaw", "minichat"):
        assert f"| {name} |" in table, name


def test_rows_come_from_the_notes_and_the_ci_tests(tmp_path):
    def n(h, v, wire, **checks):
        return HarnessNotes(harness=h, version=v, wire=wire, streaming=wire != "messages",
                            checks={"tool call": True, **checks}, recorded_at="2026-12-05")

    rows = matrix_rows([n("x", "2", "chat"), n("x", "2", "messages", splicing=False), n("y", "1", "chat")],
                       registered=["x", "y", "z"], trained={"y"})
    assert [(r["harness"], r["version"], r["wires"]) for r in rows] == [("x", "2", "chat, messages"), ("y", "1", "chat"),
                                                                         ("z", "–", "–")]
    assert rows[0]["streaming"] == "partly" and rows[0]["conformance"].startswith("fails: splicing (messages)")
    assert rows[1]["conformance"].startswith("pass") and rows[1]["trained through (CI)"] == "yes"
    assert rows[2]["conformance"] == "no conformance run recorded"
    table = render_matrix(rows)
    assert table.splitlines()[0].startswith("| harness | version | wires | streaming | tool calls |")
    page = update_doc("# t\n", table)
    assert update_doc(page, "new\n") == f"# t\n\n{BEGIN}\n\nnew\n\n{END}\n"
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "test_a.py").write_text('args = ["harness.name=[react, pi]"]\nSPEC = "data/m/mini.yaml"\n')
    (tmp_path / "train" / "test_b.py").write_text('SPEC = "other.yaml"  # no harness.name here\n')
    assert trained_in_ci(tmp_path) == {"react", "pi", "mini"}


def test_ci_trains_through_pi_react_and_the_spec_harness():
    assert {"pi", "react", "minichat"} <= trained_in_ci(ROOT / "tests")
