"""The Checkpoints pages (batchpoint.airflow.ui serves them): what each page shows, as
plain values, rendered by the Jinja2 templates in templates/ (shipped in the package),
with autoescaping on, so a pipeline's, operator's or file's name is text, never markup.

Every link is relative, so the pages work under any prefix Airflow's UI or a proxy puts
them at: the index is ``<base>/batchpoint/``, a pipeline ``<base>/batchpoint/<p>`` and a
checkpoint ``<base>/batchpoint/<p>/checkpoints/<id>``; each page knows `up`, the
relative path from it to ``<base>/``, for links into Airflow itself (its DAG pages and
its REST API, which the trigger forms post to with the UI's own session).
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime
from functools import cache
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from batchpoint.airflow.ui_barrier import BARRIER_COLUMNS, barrier_rows
from batchpoint.airflow.ui_chart import BYTES, SECONDS, Series, line_chart
from batchpoint.airflow.ui_forms import restore_form, trigger_form
from batchpoint.airflow.ui_lineage import lineage_tables
from batchpoint.airflow.ui_links import run_links
from batchpoint.airflow.ui_report import report_shown
from batchpoint.airflow.ui_schedule import paused_notice
from batchpoint.airflow.ui_theme import css_variables
from batchpoint.ops.restore_history import passed_over_text

HISTORY_COLUMNS = [
    ("checkpoint_id", "id"),
    ("type", "type"),
    ("status", "status"),
    ("trigger_time", "triggered"),
    ("duration_s", "duration"),
    ("state_size", "size"),
    ("rows", "rows"),
    ("acks", "acks"),
    ("reason", "reason"),
    ("quarantined", "gate"),
    ("restores", "restored to"),
]
TASK_COLUMNS = [
    ("task", "task"),
    ("attempt", "attempt"),
    ("ack_time", "acked"),
    ("end_to_end_s", "trigger to ack"),
    ("sync_ms", "sync"),
    ("async_ms", "async"),
    ("state_size", "bytes"),
    ("rows", "rows"),
    ("records_in", "records in"),
    ("records_out", "records out"),
]
#: A table sink's commit (ui_sinks.py), after its snapshot id or version.
COMMIT_COLUMNS = ["checkpoint", "generation", "operation", "rows", "committed"]
FILE_COLUMNS = ["task", "stream", "path", "size", "rows", "key groups", "origin"]


@cache
def templates() -> Environment:
    """The templates shipped in the package; autoescaped (HTML and SVG alike), and a
    missing value is an error, not an empty cell."""
    env = Environment(
        loader=PackageLoader("batchpoint.airflow", "templates"),
        autoescape=select_autoescape(["html", "svg"]),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["urlquote"] = quote
    return env


def _render(template: str, **context: Any) -> str:
    return templates().get_template(template).render(theme=css_variables(), **context)


def when(epoch_s: float | None) -> str:
    # 0: unknown (an unreadable record's row in the history)
    if not epoch_s:
        return ""
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%d %H:%M:%S")


def size(n: float | None) -> str:
    if n is None:
        return ""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def restore_text(e: Mapping[str, Any]) -> str:
    """One restore, in words: `restore generation 2 at <when>, gated by the quality gate`."""
    gate = f"gated by the {e['gate']}" if e["gated"] else "ungated"
    rewinding = ", sinks still rewinding" if e["in_progress"] else ""
    at, walk = when(e["restored_at"]), passed_over_text(e["passed_over"], e["quarantined"])
    return f"restore generation {e['restore_generation']} at {at}, {gate}{walk}{rewinding}"


def _history_cell(row: Mapping[str, Any], key: str) -> str:
    value = row.get(key)
    if key == "duration_s":
        return "" if value is None else f"{value:.1f}s"
    if key == "trigger_time":
        return when(value)
    if key == "state_size":
        return size(value)
    if key == "acks":
        return f"{row['acknowledged']}/{row['expected']}"
    if key == "quarantined":
        return "quarantined" if value else ""
    if key == "restores":  # where a restore went back to, as Flink's "Latest Restore"
        return "; ".join(restore_text(e) for e in value or [])
    if key == "reason":
        reason = row["failure_reason"]
        return f"{reason}: {row['failure_message']}" if reason else ""
    return "" if value is None else str(value)


def _task_cell(row: Mapping[str, Any], key: str) -> str:
    value = row.get(key)
    if key == "ack_time":
        return when(value)
    if key in ("sync_ms", "async_ms"):
        return "" if value is None else f"{value:.0f} ms"
    if key == "end_to_end_s":
        return "" if value is None else f"{value:.1f}s"
    if key == "state_size":
        return size(value)
    return "" if value is None else str(value)


def history_rows(rows: Sequence[Mapping[str, Any]], link: str) -> list[dict[str, Any]]:
    """Each checkpoint's cells, its row's classes, and `link` + id: its drill-down."""
    return [
        {
            "cells": [_history_cell(r, key) for key, _ in HISTORY_COLUMNS],
            "kind": str(r["status"]).lower() + (" restored" if r.get("restores") else ""),
            "href": f"{link}{r['checkpoint_id']}",
        }
        for r in rows
    ]


def _min_avg_max(values: Sequence[float] | None, fmt: Any) -> str:
    if not values:
        return "-"
    low, mean, high = values
    return f"{fmt(low)} / {fmt(mean)} / {fmt(high)}"


def summary_items(summary: Mapping[str, Any]) -> list[tuple[str, str]]:
    counts = (
        f"{summary['count']} on this page: {summary['completed']} completed, "
        f"{summary['failed']} failed, {summary['in_progress']} in progress"
    )
    return [
        ("counts", counts),
        ("duration min / avg / max", _min_avg_max(summary.get("duration_s"), "{:.1f}s".format)),
        ("state size min / avg / max", _min_avg_max(summary.get("state_size"), size)),
    ]


def charts(rows: Sequence[Mapping[str, Any]]) -> list[Markup]:
    """Duration and state size of the page's completed checkpoints, oldest to newest,
    each on axes of its own (ui_chart.py); none for fewer than two."""
    done = [r for r in reversed(rows) if r["outcome"] == "COMPLETED"]
    if len(done) < 2:
        return []
    ids = [r["checkpoint_id"] for r in done]
    return [
        line_chart(Series(name, ids, [float(r.get(key) or 0.0) for r in done], unit))
        for key, name, unit in (
            ("duration_s", "duration", SECONDS),
            ("state_size", "state size", BYTES),
        )
    ]


def _overview_items(overview: Mapping[str, Any]) -> list[tuple[str, str]]:
    status = overview["status"]
    if overview.get("status_detail"):
        status += f" ({overview['status_detail']})"
    pending = overview.get("pending") or []
    return [
        ("status", status),
        ("head", "none" if overview["head"] is None else f"checkpoint {overview['head']}"),
        ("latest completed checkpoint", str(overview.get("latest_checkpoint") or "-")),
        ("latest savepoint", str(overview.get("latest_savepoint") or "-")),
        ("triggered in all", str(overview.get("triggered", 0))),
        ("in progress", ", ".join(map(str, pending)) or "-"),
        ("consecutive failures", str(overview.get("consecutive_failures", 0))),
        *(("finding", f) for f in overview.get("findings") or []),
        *_latest_restore(overview.get("latest_restore")),
    ]


def _latest_restore(e: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    if e is None:
        return [("latest restore", "none")]
    return [("latest restore", f"to checkpoint {e['checkpoint_id']}: {restore_text(e)}")]


def _index_row(p: Mapping[str, Any]) -> dict[str, Any]:
    o = p["overview"]
    return {
        "name": p["pipeline"],
        "href": quote(p["pipeline"]),
        "status": o["status"],
        "detail": o.get("status_detail") or "",
        # A lagging table does not stop the pipeline: said beside its status.
        "noted": o.get("findings") or [],
        "head": o["head"] if o["head"] is not None else "-",
        "latest_checkpoint": o.get("latest_checkpoint") or "-",
        "latest_savepoint": o.get("latest_savepoint") or "-",
        "pending": ", ".join(map(str, o.get("pending") or [])) or "-",
        "failures": o.get("consecutive_failures", 0),
        "root": p["root"],
    }


def render_sinks(name: str, sinks: Sequence[Mapping[str, Any]]) -> str:
    """A pipeline's table sinks and their commits (ui_sinks.py), at
    ``<base>/batchpoint/<p>/sinks``."""
    return _render(
        "sinks.html", title=f"{name} table sinks", name=name, sinks=sinks, columns=COMMIT_COLUMNS
    )


def render_index(pipelines: Sequence[Mapping[str, Any]], *, error: str = "") -> str:
    """Browse -> Checkpoints: every pipeline the user may read, with its status."""
    rows = [] if error else [_index_row(p) for p in pipelines]
    return _render("index.html", title="Checkpoints", error=error, pipelines=rows)


def render_pipeline(
    pipeline: Mapping[str, Any],
    page: Mapping[str, Any],
    config: Mapping[str, Any],
    dags: Mapping[str, str],
    paused: Collection[str] = (),
    pending: Mapping[int, float] | None = None,
) -> str:
    """One pipeline's tab: status, summary, charts, history page, configuration, and the
    savepoint form. The page lives at ``<base>/batchpoint/<p>``. `paused`: which of its
    DAGs are; `pending`: each pending checkpoint's deadline, which a paused checkpoint
    DAG lets run out (the page says so)."""
    name = pipeline["pipeline"]
    up = "../"
    older = page["older"]
    done = [r for r in page["checkpoints"] if r["outcome"] == "COMPLETED"]
    return _render(
        "pipeline.html",
        title=f"{name} checkpoints",
        name=name,
        checkpoint_dag=dags["checkpoint"],
        checkpoint_dag_href=f"{up}dags/{quote(dags['checkpoint'])}",
        paused=paused_notice(
            dags["checkpoint"], dags["checkpoint"] in paused, pending or {}, time.time()
        ),
        overview=[*_overview_items(pipeline["overview"]), ("storage", pipeline["root"])],
        summary=summary_items(page["summary"]),
        charts=charts(page["checkpoints"]),
        chart_caption=(
            f"duration and state size of the completed checkpoints {done[-1]['checkpoint_id']}"
            f" to {done[0]['checkpoint_id']} on this page"
            if done
            else ""
        ),
        history_header=[label for _, label in HISTORY_COLUMNS],
        history=history_rows(page["checkpoints"], f"{quote(name)}/checkpoints/"),
        older_href=f"{quote(name)}?before={older}" if older is not None else "",
        savepoint_form=trigger_form(
            "savepoint",
            dags["savepoint"],
            up,
            "Take a savepoint",
            [
                ("description", "description", ""),
                ("target", "target folder", ""),
                ("stop_pipeline", "stop the pipeline afterwards", False),
            ],
            dags["savepoint"] in paused,
        ),
        deploy_plan=_deploy_plan(pipeline.get("deploy_plan")),
        config=[(k, str(v)) for k, v in sorted(config.items())],
    )


def _deploy_plan(plan: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What a deploy of the code the DAGs run would do to the head (`batchpoint plan`),
    or why it cannot be said here."""
    if plan is None:
        return None
    return {
        "error": plan.get("error", ""),
        "text": plan.get("text", ""),
        "deployable": bool(plan.get("deployable")),
    }


def render_checkpoint(
    name: str,
    detail: Mapping[str, Any],
    dags: Mapping[str, str],
    paused: Collection[str] = (),
    downstream: Sequence[str] = (),
) -> str:
    """One checkpoint's drill-down, at ``<base>/batchpoint/<p>/checkpoints/<id>``; its
    run and its tasks' logs link into Airflow (ui_links.py), its lineage to the pages
    of the checkpoints it was computed from and computed from it (ui_lineage.py).
    `downstream`: the deployed pipelines its restore form's cascade would consider."""
    cid = detail["checkpoint_id"]
    report = detail.get("quality_report")
    files = [_file_cells(f) for f in detail["files"]]
    made_by = run_links(detail, dags, "../../../")
    logs = made_by["logs"]
    return _render(
        "checkpoint.html",
        title=f"{name} {detail['type']} {cid}",
        name=name,
        kind=detail["type"],
        checkpoint_id=cid,
        run=made_by["run"],
        facts=_checkpoint_facts(detail),
        task_header=[label for _, label in TASK_COLUMNS] + (["log"] if logs else []),
        tasks=[_task_cells(t, logs) for t in detail["tasks"]],
        barrier_header=BARRIER_COLUMNS,
        barrier=barrier_rows(detail.get("barrier") or {}),
        report=None if report is None else report_shown(report, name),
        unread=bool(detail.get("findings")),  # damage read for the page: the report's
        file_header=FILE_COLUMNS,
        files=files,
        lineage=lineage_tables(detail.get("lineage"), "../../"),
        restore_form=restore_form(name, detail, dags, dags["restore"] in paused, downstream),
    )


def _task_cells(task: Mapping[str, Any], logs: Mapping[str, Any]) -> list[Any]:
    """A task's cells, and a link to the log of the try that acked, if a run made it."""
    cells: list[Any] = [_task_cell(task, key) for key, _ in TASK_COLUMNS]
    return [*cells, logs.get(task["task"], "")] if logs else cells


def _file_cells(f: Mapping[str, Any]) -> list[Any]:
    return [
        f["task"],
        f["stream"],
        f["path"],
        size(f["size"]),
        f["rows"],
        f["key_groups"] or "",
        f.get("origin", ""),
    ]


def _checkpoint_facts(detail: Mapping[str, Any]) -> list[tuple[str, str]]:
    items = [
        ("type", detail["type"]),
        ("status", f"{detail['status']}: {detail['status_meaning']}"),
        ("triggered", when(detail["trigger_time"]) or "not recorded"),
        ("duration", "" if detail["duration_s"] is None else f"{detail['duration_s']:.1f}s"),
        ("state size", size(detail["state_size"])),
        ("full state size", size(detail.get("full_state_size", detail["state_size"]))),
        ("rows", str(detail["rows"])),
        ("acks", f"{detail['acknowledged']}/{detail['expected']}"),
        ("base checkpoint", str(detail.get("base_checkpoint_id") or "-")),
        ("restore generation", str(detail.get("restore_generation", 0))),
    ]
    if detail.get("failure_reason"):
        items.append(("failure", f"{detail['failure_reason']}: {detail['failure_message']}"))
    if detail.get("quarantine"):
        items.append(("quarantined", detail["quarantine"]))
    elif detail.get("quarantined_at") is not None:
        items.append(("quarantined", when(detail["quarantined_at"])))
    items += [("finding", f) for f in detail.get("findings") or []]
    return items
