"""The dashboard's charts, drawn here as SVG — no script library, no CDN, no build step. Each chart is a
``<figure>`` holding the picture (``role="img"`` with a title naming what it shows) and, behind it, the same
numbers as a table (``<details>``), which is what a screen reader and a test read. Colours are CSS classes
whose values follow the admin's light and dark themes (``includes/styles.html``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from ..contracts.series import WAIT_EDGES_MS
from ..operator import QueueDepths, QueueWaits, SeriesPoint
from ..operator.dashboard import wait_text

WIDTH, HEIGHT = 460, 190  # the viewBox, drawn at its own shape as wide as the chart's column
LEFT, BOTTOM, TOP = 46, 22, 10  # room for the value axis, the time axis, the top tick's label

SERIES_CLASSES = tuple(f"uj-series-{i}" for i in range(6))  # one colour per queue line (includes/styles.html)

OUTCOMES = (  # (SeriesPoint field, label, CSS class), stacked bottom to top
    ("done", "Completed", "uj-fill-done"),
    ("retried", "Retried", "uj-fill-retried"),
    ("failed", "Failed", "uj-fill-failed"),
    ("dead", "Dead-lettered", "uj-fill-dead"),
)


def bucket_label(at_ms: int, width_ms: int) -> str:
    """A bucket's start as the time axis and the tables print it, in UTC: ``14:05`` within a day's
    window, ``Dec 03 14:00`` beyond."""
    stamp = datetime.fromtimestamp(at_ms / 1000, tz=UTC)
    return stamp.strftime("%H:%M" if width_ms < 1_800_000 else "%b %d %H:%M")


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 5 times a power of ten at or above ``value`` (at least 1): the top of the value axis."""
    magnitude = 1.0
    while True:
        for multiple in (1, 2, 5):
            if magnitude * multiple >= value:
                return magnitude * multiple
        magnitude *= 10


def settles_chart(points: Sequence[SeriesPoint], width_ms: int, *, title: str) -> SafeString:
    """Jobs settled per bucket, stacked by outcome, with the table behind it."""
    top = nice_ceiling(max((p.settled for p in points), default=0))
    slot = (WIDTH - LEFT) / max(len(points), 1)
    bars = []
    for i, p in enumerate(points):
        base = 0
        for field, label, css in OUTCOMES:
            count = getattr(p, field)
            if not count:
                continue
            y0, y1 = _y(base, top), _y(base + count, top)
            bars.append(
                format_html(
                    '<rect class="{}" x="{}" y="{}" width="{}" height="{}"><title>{} {}: {}</title></rect>',
                    css,
                    _n(LEFT + i * slot + slot * 0.1),
                    _n(y1),
                    _n(slot * 0.8),
                    _n(y0 - y1),
                    bucket_label(p.at_ms, width_ms),
                    label,
                    count,
                )
            )
            base += count
    rows = [(bucket_label(p.at_ms, width_ms), p.done, p.retried, p.failed, p.dead) for p in points if p.settled]
    table = _table(("Bucket (UTC)", "Completed", "Retried", "Failed", "Dead-lettered"), rows)
    legend = format_html_join(
        "",
        '<span class="uj-legend"><svg width="10" height="10"><rect class="{}" width="10" height="10"/></svg>{}</span>',
        ((css, label) for _, label, css in OUTCOMES),
    )
    levels = [(v, f"{v:g}") for v in (0, top / 2, top)]
    return _figure(title, mark_safe("".join(bars)), top, levels, [p.at_ms for p in points], width_ms, table, legend)


def run_time_chart(points: Sequence[SeriesPoint], width_ms: int, *, title: str) -> SafeString:
    """The run time per bucket, its mean and its 95th percentile (the upper edge of its bin), a line each
    through the buckets anything settled in, with the table of both behind them."""
    means: list[tuple[int, float, str]] = [
        (i, p.mean_ms, f"mean {round(p.mean_ms)} ms") for i, p in enumerate(points) if p.mean_ms is not None
    ]
    p95s: list[tuple[int, float, str]] = [
        (i, p.p95_ms, f"p95 {wait_text(p.p95_ms)}") for i, p in enumerate(points) if p.p95_ms is not None
    ]
    top = nice_ceiling(max((value for _, value, _ in (*means, *p95s)), default=0))
    rows = [
        (bucket_label(p.at_ms, width_ms), round(p.mean_ms), wait_text(p.p95_ms))
        for p in points
        if p.mean_ms is not None
    ]
    table = _table(("Bucket (UTC)", "Mean run time (ms)", "p95 run time"), rows)
    levels = [(v, run_time(v)) for v in (0, top / 2, top)]
    lines: list[tuple[str, float, Sequence[tuple[int, float, str]]]] = [("mean", 2, means), ("p95", 1, p95s)]
    return _queue_lines(title, lines, top, levels, [p.at_ms for p in points], width_ms, table)


MAX_QUEUE_LINES = len(SERIES_CLASSES)
"""The queues a chart of queues draws a line for, the highest first (the table lists every one)."""

WAIT_LEVELS = (
    0,
    2,
    5,
    8,
    11,
    13,
)  # the bins whose upper edge labels the wait axis: 10 ms, 100 ms, 1 s, 10 s, 5 min, 1 h


def wait_chart(waits: Sequence[QueueWaits], width_ms: int, *, title: str) -> SafeString:
    """Each queue's p95 wait per bucket, one line per queue on a scale of the histogram's bins (10 ms, 100 ms,
    1 s, 10 s, 5 min, 1 h labelled), with the table of every queue's started, p50 and p95 behind it."""
    top = len(WAIT_EDGES_MS) - 1
    lines = [
        (
            q.queue,
            q.worst_p95_ms,
            [
                (i, WAIT_EDGES_MS.index(p.p95_ms), f"p95 {wait_text(p.p95_ms)} ({p.started} started)")
                for i, p in enumerate(q.points)
                if p.p95_ms is not None
            ],
        )
        for q in waits
    ]
    rows = [
        (q.queue, bucket_label(p.at_ms, width_ms), p.started, wait_text(p.p50_ms), wait_text(p.p95_ms))
        for q in waits
        for p in q.points
        if p.started
    ]
    table = _table(("Queue", "Bucket (UTC)", "Started", "p50 wait", "p95 wait"), rows)
    levels = [(index, _wait_axis(WAIT_EDGES_MS[index])) for index in WAIT_LEVELS]
    at = [p.at_ms for p in waits[0].points] if waits else []
    return _queue_lines(title, lines, top, levels, at, width_ms, table)


def depth_chart(depths: Sequence[QueueDepths], width_ms: int, *, title: str) -> SafeString:
    """Each queue's most jobs waiting per bucket, one line per queue, with the table of every sampled
    bucket's waiting count and oldest due job's age behind it (the rollup samples once a minute)."""
    top = nice_ceiling(max((q.most for q in depths), default=0))
    lines = [
        (
            q.queue,
            q.most,
            [(i, p.depth, f"{p.depth} waiting") for i, p in enumerate(q.points) if p.depth is not None],
        )
        for q in depths
    ]
    rows = [
        (
            q.queue,
            bucket_label(p.at_ms, width_ms),
            p.depth,
            "—" if p.oldest_age_ms is None else age_text(p.oldest_age_ms),
        )
        for q in depths
        for p in q.points
        if p.depth
    ]
    table = _table(("Queue", "Bucket (UTC)", "Waiting (most)", "Oldest due job's age (most)"), rows)
    levels = [(v, f"{v:g}") for v in (0, top / 2, top)]
    at = [p.at_ms for p in depths[0].points] if depths else []
    return _queue_lines(title, lines, top, levels, at, width_ms, table)


def age_text(ms: int) -> str:
    """An age: ``850 ms``, ``12 s``, ``3.5 min``, ``2.1 h``."""
    if ms < 1_000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:.0f} s"
    if ms < 3_600_000:
        return f"{ms / 60_000:.1f} min"
    return f"{ms / 3_600_000:.1f} h"


def _queue_lines(
    title: str,
    lines: Sequence[tuple[str, float, Sequence[tuple[int, float, str]]]],
    top: float,
    levels: Sequence[tuple[float, str]],
    at_ms: Sequence[int],
    width_ms: int,
    table: SafeString,
) -> SafeString:
    """One line per series — ``(name, rank, [(bucket index, value, tooltip)])``: a queue, or the mean and the
    p95 — the highest ranks drawn (:data:`MAX_QUEUE_LINES`), each in its colour with a legend swatch."""
    slot = (WIDTH - LEFT) / max(len(at_ms), 1)
    marks, legend = [], []
    drawn = sorted(lines, key=lambda line: -line[1])[:MAX_QUEUE_LINES]
    for css, (queue, _, values) in zip(SERIES_CLASSES, drawn, strict=False):
        xy = [(LEFT + i * slot + slot / 2, _y(value, top), i, tip) for i, value, tip in values]
        if len(xy) > 1:
            path = " ".join(f"{'M' if n == 0 else 'L'}{x:.1f},{y:.1f}" for n, (x, y, _, _) in enumerate(xy))
            marks.append(format_html('<path class="uj-line {}" d="{}"/>', css, path))
        marks.extend(
            format_html(
                '<circle class="uj-line-dot {}" cx="{}" cy="{}" r="2.5"><title>{} {}: {}</title></circle>',
                css,
                _n(x),
                _n(y),
                queue,
                bucket_label(at_ms[i], width_ms),
                tip,
            )
            for x, y, i, tip in xy
        )
        legend.append(
            format_html(
                '<span class="uj-legend"><svg width="10" height="10"><rect class="{}" width="10" height="10"/></svg>'
                "{}</span>",
                css.replace("uj-series", "uj-swatch"),
                queue,
            )
        )
    return _figure(title, mark_safe("".join(marks)), top, levels, at_ms, width_ms, table, mark_safe("".join(legend)))


def _wait_axis(ms: int) -> str:
    """A label of the wait axis: ``10 ms``, ``1 s``, ``5 min``, ``1 h``."""
    if ms < 1_000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:g} s"
    return f"{ms / 60_000:g} min" if ms < 3_600_000 else f"{ms / 3_600_000:g} h"


def run_time(ms: float) -> str:
    """A value of the run-time axis: ``250 ms``, ``1 s``, ``2.5 s``."""
    return f"{ms:g} ms" if ms < 1000 else f"{ms / 1000:g} s"


def _n(value: float) -> str:
    """A coordinate as the SVG's text: one decimal."""
    return f"{value:.1f}"


def _y(value: float, top: float) -> float:
    return TOP + (HEIGHT - BOTTOM - TOP) * (1 - value / top)


def _figure(
    title: str,
    marks: SafeString,
    top: float,
    levels: Sequence[tuple[float, str]],
    at_ms: Sequence[int],
    width_ms: int,
    table: SafeString,
    legend: SafeString,
) -> SafeString:
    """The chart's frame around ``marks``: a grid line and label per ``(value, label)`` of ``levels`` on a
    value axis from 0 to ``top``, a time label under every sixth or so of the buckets ``at_ms``, the legend
    above and the table behind."""
    grid = format_html_join(
        "",
        '<line class="uj-grid" x1="{}" x2="{}" y1="{}" y2="{}"/>'
        '<text class="uj-axis" x="{}" y="{}" text-anchor="end">{}</text>',
        ((LEFT, WIDTH, _n(_y(v, top)), _n(_y(v, top)), LEFT - 6, _n(_y(v, top) + 4), label) for v, label in levels),
    )
    every = max(1, len(at_ms) // 6)
    ticks = format_html_join(
        "",
        '<text class="uj-axis" x="{}" y="{}" text-anchor="middle">{}</text>',
        (
            (_n(LEFT + (i + 0.5) * (WIDTH - LEFT) / len(at_ms)), HEIGHT - 6, bucket_label(at, width_ms))
            for i, at in enumerate(at_ms)
            if i % every == 0
        ),
    )
    return format_html(
        '<figure class="uj-chart"><figcaption>{}</figcaption>{}'
        '<svg viewBox="0 0 {} {}" role="img" aria-label="{}">{}{}{}</svg>'
        '<details class="uj-chart-table"><summary>Table</summary>{}</details></figure>',
        title,
        legend,
        WIDTH,
        HEIGHT,
        title,
        grid,
        ticks,
        marks,
        table,
    )


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> SafeString:
    head = format_html_join("", "<th>{}</th>", ((h,) for h in headers))
    if not rows:
        return format_html(
            '<table class="uj-table"><thead><tr>{}</tr></thead><tbody></tbody></table>'
            '<p class="uj-quiet">Nothing in this window.</p>',
            head,
        )
    body = format_html_join(
        "", "<tr>{}</tr>", ((format_html_join("", "<td>{}</td>", ((cell,) for cell in row)),) for row in rows)
    )
    return format_html('<table class="uj-table"><thead><tr>{}</tr></thead><tbody>{}</tbody></table>', head, body)
