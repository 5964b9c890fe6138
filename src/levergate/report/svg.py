"""Charts as inline SVG, drawn here in Python: a report is one file that opens offline with no
chart library to vendor or load. Three shapes: lines (CDFs, step or straight; money over time),
vertical bars (a histogram over log-spaced bins) and horizontal bars (savings per lever). Axes
take "nice" ticks (1, 2, 5 x 10^n; decades on a log axis). Every text is escaped."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from html import escape
from typing import NamedTuple

__all__ = ["Line", "bars", "hbars", "lines", "nice_ticks"]

W, H = 640, 300
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 16, 44
PALETTE = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563")
Format = Callable[[float], str]


class Line(NamedTuple):
    name: str
    points: Sequence[tuple[float, float]]
    step: bool = False


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round values from `low` to `high`, about `count` of them."""
    if high <= low:
        return [low]
    raw = (high - low) / max(1, count)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    first = math.ceil(low / step) * step
    # Clamped: a multiple of `step` may round an ulp outside the range it was chosen inside.
    return [min(max(first + i * step, low), high)
            for i in range(int((high - first) / step + 1e-9) + 1)]  # fmt: skip


def _log_ticks(low: float, high: float) -> list[float]:
    """1, 2, 5 x 10^n within the range; a narrow range (under three of those) gets linear
    ticks instead."""
    found = []
    for exponent in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1):
        for m in (1, 2, 5):
            value = m * 10.0**exponent
            if low <= value <= high:
                found.append(value)
    return found if len(found) >= 3 else [t for t in nice_ticks(low, high) if t > 0]


def number(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:.4g}"
    return f"{value:.3g}"


class _Axes:
    def __init__(self, xs: tuple[float, float], ys: tuple[float, float], *, x_log: bool) -> None:
        self.x_log = x_log and xs[0] > 0
        self.x0, self.x1 = (math.log10(xs[0]), math.log10(xs[1])) if self.x_log else xs
        if self.x1 <= self.x0:
            self.x1 = self.x0 + 1
        self.y0, self.y1 = ys if ys[1] > ys[0] else (ys[0], ys[0] + 1)

    def x(self, value: float) -> float:
        v = math.log10(max(value, 1e-12)) if self.x_log else value
        return LEFT + (v - self.x0) / (self.x1 - self.x0) * (W - LEFT - RIGHT)

    def y(self, value: float) -> float:
        return H - BOTTOM - (value - self.y0) / (self.y1 - self.y0) * (H - TOP - BOTTOM)

    def frame(self, *, x_label: str, y_label: str, x_fmt: Format, y_fmt: Format) -> list[str]:
        low, high = (10**self.x0, 10**self.x1) if self.x_log else (self.x0, self.x1)
        xticks = _log_ticks(low, high) if self.x_log else nice_ticks(low, high)
        parts = [
            (
                f'<line x1="{LEFT}" y1="{H - BOTTOM}" x2="{W - RIGHT}" y2="{H - BOTTOM}" '
                'stroke="#9ca3af"/>'
            )
        ]
        for t in xticks:
            x = self.x(t)
            parts.append(
                f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{H - BOTTOM}" '
                f'stroke="#f3f4f6"/><text x="{x:.1f}" y="{H - BOTTOM + 16}" '
                f'text-anchor="middle">{escape(x_fmt(t))}</text>'
            )
        for t in nice_ticks(self.y0, self.y1):
            y = self.y(t)
            parts.append(
                f'<line x1="{LEFT}" y1="{y:.1f}" x2="{W - RIGHT}" y2="{y:.1f}" '
                f'stroke="#f3f4f6"/><text x="{LEFT - 6}" y="{y + 4:.1f}" '
                f'text-anchor="end">{escape(y_fmt(t))}</text>'
            )
        parts.append(
            f'<text x="{(LEFT + W - RIGHT) / 2}" y="{H - 8}" text-anchor="middle" '
            f'class="label">{escape(x_label)}</text>'
            f'<text x="14" y="{(TOP + H - BOTTOM) / 2}" text-anchor="middle" '
            f'class="label" transform="rotate(-90 14 {(TOP + H - BOTTOM) / 2})">'
            f"{escape(y_label)}</text>"
        )
        return parts


def _svg(parts: list[str], title: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" role="img" '
        f'class="chart"><title>{escape(title)}</title>{"".join(parts)}</svg>'
    )


def _empty(title: str, why: str) -> str:
    return _svg(
        [f'<text x="{W / 2}" y="{H / 2}" text-anchor="middle" class="label">{escape(why)}</text>'],
        title,
    )


def lines(
    series: Sequence[Line],
    *,
    title: str,
    x_label: str,
    y_label: str,
    x_log: bool = False,
    x_fmt: Format = number,
    y_fmt: Format = number,
    y_min: float | None = None,
) -> str:
    """Lines on shared axes, a legend above them."""
    points = [p for line in series for p in line.points]
    if not points:
        return _empty(title, "no data")
    xs = [p[0] for p in points if not x_log or p[0] > 0] or [1.0]
    ys = [p[1] for p in points]
    low = min(ys) if y_min is None else min(y_min, *ys)
    axes = _Axes((min(xs), max(xs)), (low, max(ys)), x_log=x_log)
    parts = axes.frame(x_label=x_label, y_label=y_label, x_fmt=x_fmt, y_fmt=y_fmt)
    for i, line in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        path = _path(line, axes)
        if path:
            parts.append(f'<path d="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        parts.append(
            f'<rect x="{LEFT + 8 + 150 * i}" y="{TOP}" width="10" height="10" '
            f'fill="{color}"/><text x="{LEFT + 22 + 150 * i}" y="{TOP + 9}">'
            f"{escape(line.name)}</text>"
        )
    return _svg(parts, title)


def _path(line: Line, axes: _Axes) -> str:
    shown = [(x, y) for x, y in line.points if not axes.x_log or x > 0]
    out: list[str] = []
    previous: tuple[float, float] | None = None
    for x, y in shown:
        px, py = axes.x(x), axes.y(y)
        if previous is None:
            out.append(f"M{px:.1f},{py:.1f}")
        elif line.step:
            out.append(f"H{px:.1f}V{py:.1f}")
        else:
            out.append(f"L{px:.1f},{py:.1f}")
        previous = (px, py)
    return "".join(out)


def bars(
    bins: Sequence[tuple[float, float, float]],
    *,
    title: str,
    x_label: str,
    y_label: str,
    x_fmt: Format = number,
) -> str:
    """Vertical bars, one per (low, high, count) bin, on a log x axis."""
    if not bins:
        return _empty(title, "no data")
    axes = _Axes((bins[0][0], bins[-1][1]), (0.0, max(b[2] for b in bins)), x_log=True)
    parts = axes.frame(x_label=x_label, y_label=y_label, x_fmt=x_fmt, y_fmt=number)
    for low, high, count in bins:
        x0, x1, y = axes.x(low), axes.x(high), axes.y(count)
        parts.append(
            f'<rect x="{x0 + 0.5:.1f}" y="{y:.1f}" width="{max(0.5, x1 - x0 - 1):.1f}" '
            f'height="{H - BOTTOM - y:.1f}" fill="{PALETTE[0]}"><title>'
            f"{escape(x_fmt(low))}-{escape(x_fmt(high))}: {count:.0f}</title></rect>"
        )
    return _svg(parts, title)


def hbars(items: Sequence[tuple[str, float]], *, title: str, fmt: Format = number) -> str:
    """Horizontal bars from zero, one per (label, value); negative values to the left."""
    if not items:
        return _empty(title, "no data")
    height = TOP + 28 * len(items) + 8
    low = min(0.0, *(v for _, v in items))
    high = max(0.0, *(v for _, v in items)) or 1.0
    scale = (W - 150 - 120) / (high - low)
    zero = 150 + (0 - low) * scale
    parts = []
    for i, (label, value) in enumerate(items):
        y = TOP + 28 * i
        x = zero if value >= 0 else zero + value * scale
        color = PALETTE[2] if value >= 0 else PALETTE[1]
        parts.append(
            f'<text x="142" y="{y + 14}" text-anchor="end">{escape(label)}</text>'
            f'<rect x="{x:.1f}" y="{y + 2}" width="{abs(value) * scale:.1f}" '
            f'height="18" fill="{color}"/><text x="{max(zero, x + abs(value) * scale) + 6:.1f}" '
            f'y="{y + 15}">{escape(fmt(value))}</text>'
        )
    parts.append(
        f'<line x1="{zero:.1f}" y1="{TOP}" x2="{zero:.1f}" y2="{height - 8}" stroke="#9ca3af"/>'
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {height}" role="img" '
        f'class="chart"><title>{escape(title)}</title>{"".join(parts)}</svg>'
    )
