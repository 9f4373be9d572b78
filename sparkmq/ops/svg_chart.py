"""A line chart as inline SVG, rendered server-side (no JavaScript, nothing fetched from a CDN).

>>> svg = line_chart([(0.0, 5), (10.0, 3), (20.0, 0)], title="lag")
>>> svg.startswith("<svg") and "polyline" in svg
True
"""

from __future__ import annotations

import html
import time
from collections.abc import Sequence

WIDTH, HEIGHT = 640, 220
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 28, 32  # room for the axis labels


def line_chart(points: Sequence[tuple[float, float]], *, title: str, unit: str = "messages") -> str:
    """``points`` are (unix seconds, value); the x axis spans their time range, y starts at 0."""
    label = html.escape(title)
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" aria-label="{label}" '
        f'width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}">'
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="#ffffff" stroke="#d0d7de"/>'
        f'<text x="{LEFT}" y="18" font-size="13" font-family="sans-serif" fill="#24292f">{label}</text>'
    )
    if not points:
        return head + (
            f'<text x="{WIDTH // 2}" y="{HEIGHT // 2}" text-anchor="middle" font-size="12" '
            'font-family="sans-serif" fill="#57606a">no samples yet</text></svg>'
        )
    t0, t1 = points[0][0], points[-1][0]
    top_value = max(max(v for _, v in points), 1.0)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def xy(t: float, v: float) -> str:
        x = LEFT + (plot_w * (t - t0) / (t1 - t0) if t1 > t0 else plot_w / 2)
        return f"{x:.1f},{TOP + plot_h - plot_h * v / top_value:.1f}"

    axes = (
        f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{LEFT + plot_w}" y2="{TOP + plot_h}" stroke="#57606a"/>'
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + plot_h}" stroke="#57606a"/>'
        f'<text x="{LEFT - 6}" y="{TOP + 4}" text-anchor="end" font-size="11" font-family="sans-serif">'
        f"{top_value:g}</text>"
        f'<text x="{LEFT - 6}" y="{TOP + plot_h}" text-anchor="end" font-size="11" font-family="sans-serif">0</text>'
        f'<text x="{LEFT}" y="{HEIGHT - 10}" font-size="11" font-family="sans-serif">{_clock(t0)}</text>'
        f'<text x="{LEFT + plot_w}" y="{HEIGHT - 10}" text-anchor="end" font-size="11" font-family="sans-serif">'
        f"{_clock(t1)} ({html.escape(unit)})</text>"
    )
    line = " ".join(xy(t, v) for t, v in points)
    dots = "".join(
        f'<circle cx="{xy(t, v).split(",")[0]}" cy="{xy(t, v).split(",")[1]}" r="2.5" fill="#0969da"/>'
        for t, v in points[-60:]
    )
    return head + axes + f'<polyline fill="none" stroke="#0969da" stroke-width="2" points="{line}"/>' + dots + "</svg>"


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))
