"""The trigger forms of the Checkpoints pages (ui_pages.py renders them with
templates/_macros.html; templates/trigger.js posts them to Airflow's REST API): the
savepoint form of a pipeline's page, the restore form of a checkpoint's page."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from batchpoint.protocol.history_status import HistoryStatus
from batchpoint.runtime.restore_options import ungated_phrase


def trigger_form(
    form_id: str,
    dag_id: str,
    up: str,
    title: str,
    fields: Sequence[tuple[str, str, Any]],
    paused: bool = False,
    unless: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A form that triggers `dag_id` through Airflow's REST API with the UI's session:
    `fields` are (conf key, label, default); a bool default is a checkbox, a dict or list
    default (or None) a JSON text field. `unless` maps a text field to a checkbox: the
    field is shown, and required, only while that box is unticked (trigger.js). A
    `paused` DAG's form offers to unpause it on trigger (ticked, as Airflow's own form
    does); either way the script says whether the DAG is paused once the run is
    created, so a queued run never reads "triggered"."""
    inputs = []
    for key, label, default in fields:
        if isinstance(default, bool):
            field = {"name": key, "label": label, "kind": "checkbox", "value": default}
            inputs.append({**field, "unless": ""})
            continue
        kind = "json" if isinstance(default, dict | list) or default is None else "text"
        # None: an empty field, which the form sends as null (unchanged), never "null"
        value = "" if default is None else json.dumps(default) if kind == "json" else str(default)
        inputs.append(
            {
                "name": key,
                "label": label,
                "kind": kind,
                "value": value,
                "unless": (unless or {}).get(key, ""),
            }
        )
    return {
        "id": form_id,
        "dag_id": dag_id,
        "title": title,
        "api": f"{up}api/v2/dags/{quote(dag_id)}/dagRuns",
        "dag_api": f"{up}api/v2/dags/{quote(dag_id)}",
        "paused": paused,
        "runs": f"{up}dags/{quote(dag_id)}/runs/",
        "fields": inputs,
    }


def restore_form(
    pipeline: str,
    detail: Mapping[str, Any],
    dags: Mapping[str, str],
    paused: bool = False,
    downstream: Sequence[str] = (),
) -> dict[str, Any] | None:
    """The restore DAG's form for a checkpoint a restore may go back to: the head or a
    retained one (none for a quarantined, discarded or unfinished one). Its dry run
    (ticked) is the preview: the check task's log and XCom show what it would restore,
    with cascade every pipeline's target."""
    if not HistoryStatus.of_label(detail["status"]).restorable:
        return None
    cid = detail["checkpoint_id"]
    scope = ", ".join(downstream) or "none deployed"
    return trigger_form(
        "restore",
        dags["restore"],
        "../../../",
        f"Restore to {detail['type']} {cid}",
        [
            ("source", "checkpoint", str(cid)),
            ("parallelism", "new parallelism (empty: unchanged)", None),
            ("dry_run", "dry run", True),
            ("claim_mode", "claim mode (claim: retention may then drop it)", "no_claim"),
            ("cascade", f"cascade: the pipelines downstream follow ({scope})", False),
            ("quality_gate", "quality gate", True),
            # The DAG's check refuses a restore with the gate off unless this is typed:
            # without it here, unticking the gate could only fail (restore_form.py).
            (
                "confirm_ungated",
                f'without the gate, type "{ungated_phrase(pipeline)}"',
                "",
            ),
        ],
        paused,
        unless={"confirm_ungated": "quality_gate"},
    )
