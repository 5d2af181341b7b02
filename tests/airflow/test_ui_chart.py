"""The Checkpoints pages' chart (batchpoint.airflow.ui_chart): an SVG with both axes,
whose tick labels come from the data, and points where those axes say they are."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from batchpoint.airflow.dag_names import dag_ids
from batchpoint.airflow.ui_chart import BYTES, MAX_X_LABELS, SECONDS, Series, line_chart
from batchpoint.airflow.ui_pages import render_pipeline

SVG = "{http://www.w3.org/2000/svg}"


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)


def labels(root: ET.Element, kind: str) -> list[tuple[str, float, float]]:
    """(text, x, y) of each tick label on the `kind` ("x" or "y") axis."""
    return [
        (t.text or "", float(t.get("x", "nan")), float(t.get("y", "nan")))
        for t in root.iter(f"{SVG}text")
        if t.get("class") == f"tick-label {kind}"
    ]


def grid(root: ET.Element) -> list[float]:
    return [float(g.get("y1", "nan")) for g in root.iter(f"{SVG}line") if g.get("class") == "grid"]


def points(root: ET.Element) -> list[tuple[float, float, str]]:
    return [
        (float(c.get("cx", "nan")), float(c.get("cy", "nan")), c.findtext(f"{SVG}title") or "")
        for c in root.iter(f"{SVG}circle")
    ]


def test_both_axes_have_ticks_labelled_from_the_data_and_the_points_sit_on_them():
    ids, seconds = [3, 5, 8, 9], [1.5, 2.0, 4.0, 7.3]
    root = parse(line_chart(Series("duration", ids, seconds, SECONDS)))

    x = labels(root, "x")
    assert [t for t, _, _ in x] == ["3", "5", "8", "9"]  # the checkpoint ids, in order
    y = labels(root, "y")
    assert [t for t, _, _ in y] == ["0 s", "2 s", "4 s", "6 s", "8 s"]  # 0 to just above 7.3
    axis_labels = [t.text for t in root.iter(f"{SVG}text") if "axis-label" in t.get("class", "")]
    assert axis_labels == ["duration (s)", "checkpoint"]
    assert len([a for a in root.iter(f"{SVG}line") if a.get("class") == "axis"]) == 2

    # each point is where its value reads on the y axis, above its id on the x axis
    rows = grid(root)
    assert len(rows) == len(y)
    zero, top = rows[0], rows[-1]
    for (cx, cy, title), (label, lx, _), value in zip(points(root), x, seconds, strict=True):
        assert cx == lx and title.startswith(f"checkpoint {label}: ")
        assert cy == pytest.approx(zero + (top - zero) * value / 8.0, abs=0.1)
    at_four = points(root)[2][1]
    assert at_four == rows[2]  # 4.0 s lies on the "4 s" grid line


def test_the_y_axis_reads_in_the_unit_of_the_largest_value():
    mib = 1 << 20
    root = parse(line_chart(Series("state size", [1, 2], [0.5 * mib, 3.5 * mib], BYTES)))
    assert [t for t, _, _ in labels(root, "y")] == ["0 MiB", "1 MiB", "2 MiB", "3 MiB", "4 MiB"]
    assert points(root)[1][2] == "checkpoint 2: 3.5 MiB"

    root = parse(line_chart(Series("duration", [1, 2], [0.012, 0.034], SECONDS)))
    assert [t for t, _, _ in labels(root, "y")] == ["0 ms", "10 ms", "20 ms", "30 ms", "40 ms"]
    root = parse(line_chart(Series("state size", [1, 2], [0.0, 0.0], BYTES)))
    assert [t for t, _, _ in labels(root, "y")] == ["0 B", "1 B"]  # flat: still an axis


def test_a_long_history_labels_at_most_a_dozen_ids_the_newest_always():
    ids = list(range(101, 131))
    root = parse(line_chart(Series("duration", ids, [float(i % 7) for i in ids], SECONDS)))
    shown = [t for t, _, _ in labels(root, "x")]
    assert 2 <= len(shown) <= MAX_X_LABELS and shown[-1] == "130"
    ticks = [t for t in root.iter(f"{SVG}line") if t.get("class") == "tick"]
    assert len(ticks) == len(ids) == len(points(root))  # every point keeps its tick


def test_the_pipeline_page_charts_its_completed_checkpoints_duration_and_size():
    def row(cid: int, status: str, seconds: float, size: int) -> dict:
        return {
            "checkpoint_id": cid,
            "type": "checkpoint",
            "status": {"COMPLETED": "retained", "ABORTED": "aborted"}[status],
            "outcome": status,
            "trigger_time": 1.0,
            "duration_s": seconds,
            "state_size": size,
            "rows": 1,
            "acknowledged": 1,
            "expected": 1,
            "failure_reason": None,
            "failure_message": "",
            "quarantined": False,
            "restores": [],
        }

    rows = [
        row(4, "COMPLETED", 9.0, 3000),
        row(3, "ABORTED", 50.0, 0),
        row(2, "COMPLETED", 3.0, 900),
    ]
    overview = {"status": "running", "head": 4, "pending": [], "findings": []}
    about = {"pipeline": "payments", "root": "/tmp/x", "overview": overview}
    summary = {"count": 3, "completed": 2, "failed": 1, "in_progress": 0}
    page = {"checkpoints": rows, "older": None, "summary": summary}
    html = render_pipeline(about, page, {}, dag_ids("payments"))

    svgs = [
        html[i : html.index("</svg>", i) + 6]
        for i in range(len(html))
        if html.startswith("<svg", i)
    ]
    assert len(svgs) == 2
    duration, size = (parse(s) for s in svgs)
    for chart in (duration, size):  # the aborted checkpoint is not drawn
        assert [t for t, _, _ in labels(chart, "x")] == ["2", "4"]
    assert [t for t, _, _ in labels(duration, "y")][-1] == "10 s"  # above 9.0, not 50
    assert [t for t, _, _ in labels(size, "y")][-1] == "3 KiB"
