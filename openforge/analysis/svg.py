"""Inline SVG charts for the HTML report (no JavaScript, no external assets).

Owns: :class:`Series` and :func:`line_chart` (several series over a shared x axis, optional
±band, one ``<circle class="pt">`` per point with a ``<title>`` tooltip) and :func:`stacked_bar`
(the status breakdown) and :func:`stacked_columns` (statuses per training step). Output is an SVG string safe to embed (all text is escaped).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape

__all__ = ["Series", "line_chart", "stacked_bar", "stacked_columns"]

PALETTE = ["#2563eb", "#16a34a", "#d97706", "#9333ea", "#dc2626", "#0891b2", "#4b5563"]


@dataclass
class Series:
    label: str
    points: list[tuple[float, float]]
    color: str = ""
    band: list[tuple[float, float, float]] = field(default_factory=list)  # (x, low, high)


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        return [lo]
    step = (hi - lo) / (n - 1)
    return [lo + i * step for i in range(n)]


def _fmt(v: float) -> str:
    return f"{v:.0f}" if abs(v - round(v)) < 1e-9 else f"{v:.2f}"


def line_chart(
    series: list[Series],
    *,
    title: str,
    y_range: tuple[float, float] | None = None,
    x_label: str = "step",
    width: int = 520,
    height: int = 240,
    chart_id: str = "",
) -> str:
    """Line chart of ``series`` (x = training step). Empty series render an explanatory note."""
    pad_l, pad_r, pad_t, pad_b = 46, 12, 44, 34
    pts = [p for s in series for p in s.points]
    head = (f'<svg class="chart" id="{escape(chart_id)}" xmlns="http://www.w3.org/2000/svg" '
            f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
            f'aria-label="{escape(title)}"><text class="chart-title" x="{pad_l}" y="16">{escape(title)}</text>')
    if not pts:
        return head + f'<text class="empty" x="{width / 2}" y="{height / 2}" text-anchor="middle">no data</text></svg>'
    xs = [p[0] for p in pts]
    ys = [p[1] for p in pts] + [b for s in series for _, lo, hi in s.band for b in (lo, hi)]
    x0, x1 = min(xs), max(xs)
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    y0, y1 = y_range if y_range else (min(ys), max(ys))
    if y1 == y0:
        y0, y1 = y0 - 0.5, y1 + 0.5
    pw, ph = width - pad_l - pad_r, height - pad_t - pad_b

    def sx(x: float) -> float:
        return pad_l + (x - x0) / (x1 - x0) * pw

    def sy(y: float) -> float:
        return pad_t + (1 - (min(max(y, y0), y1) - y0) / (y1 - y0)) * ph

    out = [head]
    for t in _ticks(y0, y1):
        out.append(f'<line class="grid" x1="{pad_l}" x2="{width - pad_r}" y1="{sy(t):.1f}" y2="{sy(t):.1f}"/>'
                   f'<text class="tick" x="{pad_l - 6}" y="{sy(t) + 4:.1f}" text-anchor="end">{_fmt(t)}</text>')
    xt = sorted(set(xs)) if len(set(xs)) <= 8 else _ticks(x0, x1)
    for t in xt:
        out.append(f'<text class="tick" x="{sx(t):.1f}" y="{height - pad_b + 16}" text-anchor="middle">{_fmt(t)}</text>')
    out.append(f'<text class="axis" x="{pad_l + pw / 2}" y="{height - 4}" text-anchor="middle">{escape(x_label)}</text>')
    for i, s in enumerate(series):
        color = s.color or PALETTE[i % len(PALETTE)]
        if s.band:
            upper = " ".join(f"{sx(x):.1f},{sy(hi):.1f}" for x, _, hi in s.band)
            lower = " ".join(f"{sx(x):.1f},{sy(lo):.1f}" for x, lo, _ in reversed(s.band))
            out.append(f'<polygon class="band" points="{upper} {lower}" fill="{color}" fill-opacity="0.12"/>')
        line = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in s.points)
        out.append(f'<polyline class="line" data-series="{escape(s.label)}" points="{line}" fill="none" '
                   f'stroke="{color}" stroke-width="2"/>')
        for x, y in s.points:
            out.append(f'<circle class="pt" data-series="{escape(s.label)}" data-x="{x}" data-y="{y}" '
                       f'cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{color}">'
                       f'<title>{escape(s.label)} @ {x_label} {_fmt(x)}: {y:.3f}</title></circle>')
    lx = pad_l
    for i, s in enumerate(series):
        color = s.color or PALETTE[i % len(PALETTE)]
        out.append(f'<rect x="{lx}" y="{pad_t - 20}" width="10" height="10" fill="{color}"/>'
                   f'<text class="legend" x="{lx + 14}" y="{pad_t - 11}">{escape(s.label)}</text>')
        lx += 24 + 7 * len(s.label)
    out.append("</svg>")
    return "".join(out)


STATUS_COLORS = {
    "success": "#16a34a", "policy_failure": "#dc2626", "timeout": "#d97706", "harness_error": "#7c3aed",
    "env_error": "#0891b2", "infra_error": "#4b5563", "cancelled": "#9ca3af",
}


def stacked_bar(counts: dict[str, int], *, width: int = 520, height: int = 56) -> str:
    """One horizontal bar split by status, with a legend of counts."""
    total = sum(counts.values())
    out = [f'<svg class="statusbar" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
           f'width="{width}" height="{height}" role="img" aria-label="status breakdown">']
    if not total:
        out.append('<text x="4" y="20">no rollouts</text></svg>')
        return "".join(out)
    x = 0.0
    lx = 0.0
    for status, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        w = n / total * width
        color = STATUS_COLORS.get(status, "#6b7280")
        out.append(f'<rect class="seg" data-status="{escape(status)}" data-count="{n}" x="{x:.1f}" y="0" '
                   f'width="{w:.1f}" height="22" fill="{color}"><title>{escape(status)}: {n}</title></rect>')
        label = f"{status} {n} ({100 * n / total:.0f} %)"
        out.append(f'<rect x="{lx:.0f}" y="32" width="10" height="10" fill="{color}"/>'
                   f'<text class="legend" x="{lx + 14:.0f}" y="41">{escape(label)}</text>')
        x += w
        lx += 24 + 6.3 * len(label)
    out.append("</svg>")
    return "".join(out)


def stacked_columns(per_step: list[tuple[float, dict[str, int]]], *, title: str, width: int = 520,
                    height: int = 200, chart_id: str = "") -> str:
    """One column per step, split by status (share of that step's rollouts)."""
    head = (f'<svg class="chart" id="{escape(chart_id)}" xmlns="http://www.w3.org/2000/svg" '
            f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
            f'aria-label="{escape(title)}"><text class="chart-title" x="46" y="16">{escape(title)}</text>')
    rows = [(x, c) for x, c in per_step if sum(c.values())]
    if not rows:
        return head + f'<text class="empty" x="{width / 2}" y="{height / 2}" text-anchor="middle">no data</text></svg>'
    pad_l, pad_r, pad_t, pad_b = 46, 12, 28, 30
    pw, ph = width - pad_l - pad_r, height - pad_t - pad_b
    slot = pw / len(rows)
    bar = max(2.0, min(36.0, slot * 0.7))
    out = [head]
    for t in (0.0, 0.5, 1.0):
        y = pad_t + (1 - t) * ph
        out.append(f'<line class="grid" x1="{pad_l}" x2="{width - pad_r}" y1="{y:.1f}" y2="{y:.1f}"/>'
                   f'<text class="tick" x="{pad_l - 6}" y="{y + 4:.1f}" text-anchor="end">{t:.0%}</text>')
    every = max(1, len(rows) // 10)
    for i, (x, counts) in enumerate(rows):
        total = sum(counts.values())
        cx = pad_l + slot * (i + 0.5)
        y = pad_t + ph
        for status, n in sorted(counts.items(), key=lambda kv: list(STATUS_COLORS).index(kv[0])
                                if kv[0] in STATUS_COLORS else 99):
            h = n / total * ph
            y -= h
            out.append(f'<rect class="col" data-step="{_fmt(x)}" data-status="{escape(status)}" data-count="{n}" '
                       f'x="{cx - bar / 2:.1f}" y="{y:.1f}" width="{bar:.1f}" height="{h:.1f}" '
                       f'fill="{STATUS_COLORS.get(status, "#6b7280")}"><title>step {_fmt(x)} · {escape(status)}: '
                       f'{n} of {total}</title></rect>')
        if i % every == 0:
            out.append(f'<text class="tick" x="{cx:.1f}" y="{height - pad_b + 14}" text-anchor="middle">{_fmt(x)}</text>')
    out.append(f'<text class="axis" x="{pad_l + pw / 2}" y="{height - 2}" text-anchor="middle">step</text></svg>')
    return "".join(out)
