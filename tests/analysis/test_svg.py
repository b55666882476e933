"""Inline SVG charts: edge cases and escaping (the report embeds them as-is)."""

from __future__ import annotations

import re
from pathlib import Path

from openforge.analysis.report import build_report
from openforge.analysis.rundir import load_run
from openforge.analysis.svg import Series, line_chart, stacked_bar, stacked_columns

from .factory import traj


def _circles(svg: str) -> list[tuple[float, float]]:
    return [(float(x), float(y)) for x, y in re.findall(r'<circle class="pt"[^>]*cx="([\d.]+)" cy="([\d.]+)"', svg)]


def test_empty_and_single_point() -> None:
    assert "no data" in line_chart([Series("r", [])], title="t")
    one = _circles(line_chart([Series("r", [(3.0, 0.5)])], title="t"))
    assert len(one) == 1
    assert "no rollouts" in stacked_bar({}) and "no data" in stacked_columns([], title="t")


def test_points_map_monotonically_and_clip_to_the_range() -> None:
    pts = _circles(line_chart([Series("r", [(0, 0.0), (1, 0.5), (2, 1.0), (3, 7.0)])], title="t", y_range=(0, 1)))
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    assert xs == sorted(xs) and ys[0] > ys[1] > ys[2]  # SVG y grows downwards
    assert ys[3] == ys[2]  # 7.0 is clipped to the top of the 0..1 range


def test_labels_are_escaped() -> None:
    svg = line_chart([Series('<img src=x onerror="1">', [(0, 1)])], title="<b>t</b>")
    assert "<img" not in svg and "<b>" not in svg and "&lt;img" in svg


def test_report_escapes_recorded_text(tmp_path: Path) -> None:
    evil = "<script>alert(1)</script>"
    t = traj([("bash", {"command": f"echo '{evil}'"}, evil)], task_id=evil, token_ids=True)
    (tmp_path / "t.json").write_text(t.to_json())
    html = build_report(load_run(tmp_path / "t.json"))
    assert html.count("<script>") == 1  # only the report's own script
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
