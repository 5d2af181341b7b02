"""HTML for the Checkpoints pages (batchpoint.airflow.ui serves them).

Every link is relative, so the pages work under any prefix Airflow's UI or a proxy puts
them at: the index is ``<base>/batchpoint/``, a pipeline ``<base>/batchpoint/<p>`` and a
checkpoint ``<base>/batchpoint/<p>/checkpoints/<id>``; each renderer gets `up`, the
relative path from its page to ``<base>/``, for links into Airflow itself (its DAG
pages and its REST API, which the trigger forms post to with the UI's own session).
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from batchpoint.airflow.ui_shell import PAGE

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


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


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
    at = when(e["restored_at"])
    return f"restore generation {e['restore_generation']} at {at}, {gate}{rewinding}"


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


def history_table(rows: Sequence[Mapping[str, Any]], link: str) -> str:
    """`link` + id is each checkpoint's drill-down, relative to the page."""
    header = "".join(f"<th>{label}</th>" for _, label in HISTORY_COLUMNS)
    body = []
    for r in rows:
        cells = []
        for key, _ in HISTORY_COLUMNS:
            text = esc(_history_cell(r, key))
            if key == "checkpoint_id":
                text = f"<a href='{esc(link)}{r['checkpoint_id']}'>{text}</a>"
            cells.append(f"<td>{text}</td>")
        kind = str(r["status"]).lower() + (" restored" if r.get("restores") else "")
        body.append(f"<tr class='{esc(kind)}'>{''.join(cells)}</tr>")
    return f"<table><thead><tr>{header}</tr></thead><tbody>{''.join(body)}</tbody></table>"


FILE_HEADER = (
    "<tr><th>task</th><th>stream</th><th>path</th><th>size</th><th>rows</th>"
    "<th>key groups</th><th>origin</th></tr>"
)


def _table(header_row: str, body_rows: str) -> str:
    return f"<table><thead>{header_row}</thead><tbody>{body_rows}</tbody></table>"


def _definition_list(items: Sequence[tuple[str, str]]) -> str:
    return "<dl>" + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in items) + "</dl>"


def _min_avg_max(values: Sequence[float] | None, fmt: Any) -> str:
    if not values:
        return "-"
    low, mean, high = values
    return f"{fmt(low)} / {fmt(mean)} / {fmt(high)}"


def summary_block(summary: Mapping[str, Any]) -> str:
    counts = (
        f"{summary['count']} on this page: {summary['completed']} completed, "
        f"{summary['failed']} failed, {summary['in_progress']} in progress"
    )
    seconds = _min_avg_max(summary.get("duration_s"), lambda v: f"{v:.1f}s")
    sizes = _min_avg_max(summary.get("state_size"), size)
    return (
        "<section class='summary'><h3>Summary</h3>"
        + _definition_list(
            [
                ("counts", counts),
                ("duration min / avg / max", seconds),
                ("state size min / avg / max", sizes),
            ]
        )
        + "</section>"
    )


def chart(rows: Sequence[Mapping[str, Any]], width: int = 480, height: int = 90) -> str:
    """Duration and state size of the page's completed checkpoints, oldest to newest, each
    scaled to its own maximum: an inline SVG, nothing to load."""
    done = [r for r in reversed(rows) if r["status"] == "COMPLETED"]
    if len(done) < 2:
        return ""
    lines = []
    for key, colour, label in (("duration_s", "#06c", "duration"), ("state_size", "#c60", "size")):
        values = [float(r.get(key) or 0.0) for r in done]
        top = max(values) or 1.0
        step = width / (len(values) - 1)
        points = " ".join(
            f"{i * step:.1f},{height - 4 - (v / top) * (height - 8):.1f}"
            for i, v in enumerate(values)
        )
        lines.append(
            f"<polyline class='{label}' fill='none' stroke='{colour}' stroke-width='2' "
            f"points='{points}'><title>{label}</title></polyline>"
        )
    first, last = done[0]["checkpoint_id"], done[-1]["checkpoint_id"]
    return (
        f"<figure class='chart'><svg width='{width}' height='{height}' role='img' "
        f"aria-label='duration and state size of checkpoints {first} to {last}'>"
        + "".join(lines)
        + "</svg><figcaption><span style='color:#06c'>duration</span> and "
        f"<span style='color:#c60'>state size</span>, checkpoints {first} to {last} "
        "(completed, each line scaled to its maximum)</figcaption></figure>"
    )


def trigger_form(
    form_id: str, dag_id: str, up: str, title: str, fields: Sequence[tuple[str, str, Any]]
) -> str:
    """A form that triggers `dag_id` through Airflow's REST API with the UI's session:
    `fields` are (conf key, label, default); a bool default is a checkbox, a dict or list
    default a JSON text field."""
    inputs = []
    for key, label, default in fields:
        name = esc(key)
        if isinstance(default, bool):
            checked = " checked" if default else ""
            inputs.append(
                f"<label><input type='checkbox' name='{name}'{checked}> {esc(label)}</label>"
            )
        else:
            kind = "json" if isinstance(default, dict | list) or default is None else "text"
            value = json.dumps(default) if kind == "json" else str(default)
            inputs.append(
                f"<label>{esc(label)} <input name='{name}' data-kind='{kind}' "
                f"value='{esc(value)}'></label>"
            )
    api = f"{up}api/v2/dags/{quote(dag_id)}/dagRuns"
    runs = f"{up}dags/{quote(dag_id)}/runs/"
    return (
        f"<form class='trigger' id='{esc(form_id)}' data-api='{esc(api)}' "
        f"data-runs='{esc(runs)}'><h3>{esc(title)}</h3>"
        + " ".join(inputs)
        + f" <button type='submit'>Trigger {esc(dag_id)}</button>"
        "<output></output></form>"
    )


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


def render_index(pipelines: Sequence[Mapping[str, Any]], *, error: str = "") -> str:
    """Browse -> Checkpoints: every pipeline the user may read, with its status."""
    if error:
        return PAGE.format(title="Checkpoints", body=f"<p class='error'>{esc(error)}</p>")
    if not pipelines:
        return PAGE.format(title="Checkpoints", body="<p>No pipelines you may read.</p>")
    header = (
        "<tr><th>pipeline</th><th>status</th><th>head</th><th>latest checkpoint</th>"
        "<th>latest savepoint</th><th>in progress</th><th>failures</th><th>storage</th></tr>"
    )
    rows = []
    for p in pipelines:
        o = p["overview"]
        detail = f" title='{esc(o['status_detail'])}'" if o.get("status_detail") else ""
        findings = o.get("findings") or []
        # A lagging table does not stop the pipeline: said beside its status.
        noted = (
            f" <span class='error' title='{esc('; '.join(findings))}'>"
            f"({len(findings)} finding(s))</span>"
            if findings
            else ""
        )
        rows.append(
            f"<tr class='{esc(o['status'])}'>"
            f"<td><a href='{quote(p['pipeline'])}'>{esc(p['pipeline'])}</a></td>"
            f"<td{detail}>{esc(o['status'])}{noted}</td>"
            f"<td>{esc(o['head'] if o['head'] is not None else '-')}</td>"
            f"<td>{esc(o.get('latest_checkpoint') or '-')}</td>"
            f"<td>{esc(o.get('latest_savepoint') or '-')}</td>"
            f"<td>{esc(', '.join(map(str, o.get('pending') or [])) or '-')}</td>"
            f"<td>{esc(o.get('consecutive_failures', 0))}</td>"
            f"<td>{esc(p['root'])}</td></tr>"
        )
    body = (
        f"<h2>Checkpoints</h2><table><thead>{header}</thead><tbody>{''.join(rows)}</tbody></table>"
    )
    return PAGE.format(title="Checkpoints", body=body)


def render_pipeline(
    pipeline: Mapping[str, Any],
    page: Mapping[str, Any],
    config: Mapping[str, Any],
    dags: Mapping[str, str],
) -> str:
    """One pipeline's tab: status, summary, chart, history page, configuration, and the
    savepoint form. The page lives at ``<base>/batchpoint/<p>``."""
    name = pipeline["pipeline"]
    up = "../"
    older = page["older"]
    more = (
        f"<p><a class='older' href='{quote(name)}?before={older}'>older checkpoints</a></p>"
        if older is not None
        else ""
    )
    body = (
        f"<p><a href='./'>all pipelines</a> &middot; "
        f"<a href='{up}dags/{quote(dags['checkpoint'])}'>{esc(dags['checkpoint'])}</a></p>"
        f"<h2>{esc(name)}</h2>"
        + _definition_list([*_overview_items(pipeline["overview"]), ("storage", pipeline["root"])])
        + summary_block(page["summary"])
        + chart(page["checkpoints"])
        + "<h3>History</h3>"
        + history_table(page["checkpoints"], f"{quote(name)}/checkpoints/")
        + more
        + trigger_form(
            "savepoint",
            dags["savepoint"],
            up,
            "Take a savepoint",
            [
                ("description", "description", ""),
                ("target", "target folder", ""),
                ("stop_pipeline", "stop the pipeline afterwards", False),
            ],
        )
        + deploy_plan_block(pipeline.get("deploy_plan"))
        + "<h3>Configuration</h3>"
        + _definition_list([(k, str(v)) for k, v in sorted(config.items())])
    )
    return PAGE.format(title=f"{name} checkpoints", body=body)


def deploy_plan_block(plan: Mapping[str, Any] | None) -> str:
    """What a deploy of the code the DAGs run would do to the head (`batchpoint plan`),
    or why it cannot be said here."""
    if plan is None:
        return ""
    if "error" in plan:
        return f"<h3>Deploy plan</h3><p class='error'>{esc(plan['error'])}</p>"
    css = "ok" if plan.get("deployable") else "error"
    return f"<h3>Deploy plan</h3><pre class='{css}'>{esc(plan.get('text', ''))}</pre>"


def render_checkpoint(name: str, detail: Mapping[str, Any], dags: Mapping[str, str]) -> str:
    """One checkpoint's drill-down, at ``<base>/batchpoint/<p>/checkpoints/<id>``."""
    cid = detail["checkpoint_id"]
    task_header = "".join(f"<th>{label}</th>" for _, label in TASK_COLUMNS)
    tasks = "".join(
        "<tr>" + "".join(f"<td>{esc(_task_cell(t, k))}</td>" for k, _ in TASK_COLUMNS) + "</tr>"
        for t in detail["tasks"]
    )
    files = "".join(
        f"<tr><td>{esc(f['task'])}</td><td>{esc(f['stream'])}</td><td>{esc(f['path'])}</td>"
        f"<td>{esc(size(f['size']))}</td><td>{esc(f['rows'])}</td>"
        f"<td>{esc(f['key_groups'] or '')}</td><td>{esc(f.get('origin', ''))}</td></tr>"
        for f in detail["files"]
    )
    body = (
        f"<p><a href='../../'>all pipelines</a> &middot; "
        f"<a href='../../{quote(name)}'>{esc(name)}</a></p>"
        f"<h2>{esc(name)}: {esc(detail['type'])} {cid}</h2>"
        + _definition_list(_checkpoint_facts(detail))
        + "<h3>Tasks</h3>"
        + _table(f"<tr>{task_header}</tr>", tasks)
        + "<h3>Quality gate</h3>"
        + _quality_report(detail.get("quality_report"))
        + "<h3>Files</h3>"
        + _table(FILE_HEADER, files)
        + _restore_form(detail, dags)
    )
    return PAGE.format(title=f"{name} {detail['type']} {cid}", body=body)


def _checkpoint_facts(detail: Mapping[str, Any]) -> list[tuple[str, str]]:
    items = [
        ("type", detail["type"]),
        ("status", detail["status"]),
        ("triggered", when(detail["trigger_time"])),
        ("duration", "" if detail["duration_s"] is None else f"{detail['duration_s']:.1f}s"),
        ("state size", size(detail["state_size"])),
        ("full state size", size(detail.get("full_state_size", detail["state_size"]))),
        ("rows", str(detail["rows"])),
        ("acks", f"{detail['acknowledged']}/{detail['expected']}"),
        ("base checkpoint", str(detail.get("base_checkpoint_id") or "-")),
        ("restore generation", str(detail.get("restore_generation", 0))),
        ("barrier", json.dumps(detail.get("barrier") or {}, sort_keys=True)),
    ]
    if detail.get("failure_reason"):
        items.append(("failure", f"{detail['failure_reason']}: {detail['failure_message']}"))
    if detail.get("quarantine"):
        items.append(("quarantined", detail["quarantine"]))
    elif detail.get("quarantined_at") is not None:
        items.append(("quarantined", when(detail["quarantined_at"])))
    return items


def _quality_report(report: Mapping[str, Any] | None) -> str:
    if report is None:
        return "<p>No quality-gate report for this checkpoint.</p>"
    verdict = "passed" if report.get("passed") else "FAILED"
    lines = "\n".join(report.get("lines") or [])
    return (
        f"<p class='{'ok' if report.get('passed') else 'error'}'>verdict: {esc(verdict)}"
        f" ({esc(report.get('mode', ''))}, {esc(report.get('evaluated_at', ''))})</p>"
        f"<pre>{esc(lines)}</pre>"
        + (
            f"<p><a href='{esc(report['data_docs'])}'>Data Docs</a></p>"
            if report.get("data_docs")
            else ""
        )
    )


def _restore_form(detail: Mapping[str, Any], dags: Mapping[str, str]) -> str:
    """The restore DAG's form for a completed checkpoint (none for any other)."""
    if detail["status"] != "COMPLETED":
        return ""
    cid = detail["checkpoint_id"]
    return trigger_form(
        "restore",
        dags["restore"],
        "../../../",
        f"Restore to {detail['type']} {cid}",
        [
            ("source", "checkpoint", str(cid)),
            ("parallelism", "new parallelism", None),
            ("dry_run", "dry run", True),
            ("claim", "claim it (retention may then drop it)", False),
            ("quality_gate", "quality gate", True),
        ],
    )
