"""A small line chart as inline SVG for the Checkpoints pages: a pure function from a
series to SVG text, with nothing to load at view time (the machines that run the UI may
have no internet, so no chart library from a CDN, and an inline SVG needs no script).

    line_chart(Series("duration", ids, seconds, SECONDS), ...)

The x axis is categorical: one evenly spaced tick per point, labelled by its checkpoint
id (labels thinned to at most `MAX_X_LABELS`, the newest always shown). The y axis starts
at 0 and ends at the first "nice" tick (1, 2 or 5 times a power of ten, in the unit the
largest value reads best in) at or above the largest value, with a labelled tick and a
grid line per step. Each point is a circle whose <title> gives its exact value, which a
browser shows on hover. Colours come from the page's CSS (classes, no inline colours),
so the chart follows the theme and dark mode.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

#: At most this many labels on the x axis; the others' ticks stay, unlabelled.
MAX_X_LABELS = 12
#: About this many steps on the y axis.
Y_STEPS = 4


@dataclass(frozen=True)
class Unit:
    """How a series' values read: (scale, name) pairs, largest first; a value is shown in
    the first unit whose scale it reaches (the last one otherwise)."""

    steps: tuple[tuple[float, str], ...]

    def pick(self, top: float) -> tuple[float, str]:
        for scale, name in self.steps:
            if top >= scale:
                return scale, name
        return self.steps[-1]


SECONDS = Unit(((3600.0, "h"), (60.0, "min"), (1.0, "s"), (0.001, "ms")))
BYTES = Unit(((float(1 << 30), "GiB"), (float(1 << 20), "MiB"), (1024.0, "KiB"), (1.0, "B")))


@dataclass(frozen=True)
class Series:
    name: str
    x: Sequence[object]
    y: Sequence[float]
    unit: Unit


def nice_step(span: float, steps: int = Y_STEPS) -> float:
    """The smallest of 1, 2, 5 times a power of ten that covers `span` in `steps` steps."""
    if span <= 0:
        return 1.0
    raw = span / steps
    power = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw * (1 - 1e-12))


def y_ticks(top: float, unit: Unit) -> tuple[list[float], float, str]:
    """The y ticks (in the series' own values, 0 first), the unit's scale and name."""
    scale, name = unit.pick(top)
    step = nice_step(top / scale)
    count = max(1, math.ceil(top / scale / step - 1e-9))
    return [i * step * scale for i in range(count + 1)], scale, name


def _number(value: float) -> str:
    return f"{value:.10g}" if value == int(value) else f"{value:.3g}"


def tick_label(value: float, scale: float, name: str) -> str:
    return f"{_number(round(value / scale, 9))} {name}"


@dataclass(frozen=True)
class Frame:
    """The plot area inside the SVG (pixels), its margins leaving room for the labels."""

    width: int = 560
    height: int = 200
    left: int = 64
    right: int = 16
    top: int = 12
    bottom: int = 40

    @property
    def x0(self) -> float:
        return float(self.left)

    @property
    def x1(self) -> float:
        return float(self.width - self.right)

    @property
    def y0(self) -> float:  # the baseline (value 0)
        return float(self.height - self.bottom)

    @property
    def y1(self) -> float:
        return float(self.top)

    def x(self, i: int, n: int) -> float:
        if n == 1:
            return (self.x0 + self.x1) / 2
        return self.x0 + i * (self.x1 - self.x0) / (n - 1)

    def y(self, value: float, top: float) -> float:
        return self.y0 - (value / top) * (self.y0 - self.y1)


def _x_axis(series: Series, f: Frame) -> list[str]:
    n = len(series.x)
    every = max(1, math.ceil(n / MAX_X_LABELS))
    parts = [f"<line class='axis' x1='{f.x0}' y1='{f.y0}' x2='{f.x1}' y2='{f.y0}'/>"]
    for i, label in enumerate(series.x):
        x = round(f.x(i, n), 1)
        parts.append(f"<line class='tick' x1='{x}' y1='{f.y0}' x2='{x}' y2='{f.y0 + 4}'/>")
        if (n - 1 - i) % every == 0:  # counted from the newest, which is always labelled
            parts.append(
                f"<text class='tick-label x' x='{x}' y='{f.y0 + 16}' "
                f"text-anchor='middle'>{escape(label)}</text>"
            )
    parts.append(
        f"<text class='axis-label x' x='{(f.x0 + f.x1) / 2}' y='{f.height - 6}' "
        "text-anchor='middle'>checkpoint</text>"
    )
    return parts


def _y_axis(ticks: list[float], scale: float, name: str, series: Series, f: Frame) -> list[str]:
    top = ticks[-1] or 1.0
    parts = [f"<line class='axis' x1='{f.x0}' y1='{f.y1}' x2='{f.x0}' y2='{f.y0}'/>"]
    for value in ticks:
        y = round(f.y(value, top), 1)
        parts.append(f"<line class='grid' x1='{f.x0}' y1='{y}' x2='{f.x1}' y2='{y}'/>")
        parts.append(
            f"<text class='tick-label y' x='{f.x0 - 6}' y='{y + 4}' text-anchor='end'>"
            f"{escape(tick_label(value, scale, name))}</text>"
        )
    mid = (f.y0 + f.y1) / 2
    parts.append(
        f"<text class='axis-label y' x='12' y='{mid}' text-anchor='middle' "
        f"transform='rotate(-90 12 {mid})'>{escape(series.name)} ({escape(name)})</text>"
    )
    return parts


def line_chart(series: Series, frame: Frame | None = None) -> Markup:
    """`series` as an SVG line chart with both axes, their ticks and labels."""
    f = frame or Frame()
    n = len(series.y)
    ticks, scale, name = y_ticks(max(series.y, default=0.0), series.unit)
    top = ticks[-1] or 1.0
    points, dots = [], []
    for i, (label, value) in enumerate(zip(series.x, series.y, strict=True)):
        x, y = round(f.x(i, n), 1), round(f.y(value, top), 1)
        points.append(f"{x},{y}")
        exact = tick_label(value, scale, name)
        dots.append(
            f"<circle class='point' cx='{x}' cy='{y}' r='3' data-value='{value!r}'>"
            f"<title>checkpoint {escape(label)}: {escape(exact)}</title></circle>"
        )
    caption = f"{series.name} of checkpoints {series.x[0]} to {series.x[-1]}" if n else ""
    body = [
        *_y_axis(ticks, scale, name, series, f),
        *_x_axis(series, f),
        f"<polyline class='line' fill='none' points='{' '.join(points)}'/>",
        *dots,
    ]
    return Markup(
        f"<svg class='chart {escape(series.name).replace(' ', '-')}' "
        f"viewBox='0 0 {f.width} {f.height}' width='{f.width}' height='{f.height}' "
        f"role='img' aria-label='{escape(caption)}' xmlns='http://www.w3.org/2000/svg'>"
        f"<title>{escape(caption)}</title>" + "".join(body) + "</svg>"
    )
