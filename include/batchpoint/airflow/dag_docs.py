"""What the batchpoint DAGs and their tasks say about themselves in the Airflow UI:
each DAG's page (the graph, its settings, what a run does) and each task's doc."""

from __future__ import annotations

from batchpoint.airflow.config import AirflowDeployment
from batchpoint.airflow.restore_form import restore_form_table
from batchpoint.ops.epoch_plan import TaskKind
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.pipeline import OperatorKind, PipelineSpec
from batchpoint.runtime.api import Pipeline

#: The doc of each task whose doc depends on nothing but its kind.
TASK_DOCS: dict[TaskKind, str] = {
    TaskKind.WAIT_FOR_ACKS: "Waits for every expected task's ack; fails at once on a decline.",
    TaskKind.AUDIT: "Write-audit-publish: runs the pipeline's quality suites on the checkpoint's "
    "state before it completes; passing, completes it and publishes the sinks; failing, "
    'aborts it with reason "quality gate" (report stored beside it) and fails.',
    TaskKind.FINALIZE: "Writes the COMPLETED outcome (after checking every file) and publishes "
    "sinks.",
    TaskKind.EXPORT_SAVEPOINT: "Copies every file of the savepoint with relative paths, then "
    "_metadata.",
    TaskKind.STOP_PIPELINE: "Pauses the checkpoint DAG through the REST API when the form asks to.",
    TaskKind.CLEANUP: "Always runs: aborts a checkpoint left pending (declined or expired), "
    "removes what it staged, collects garbage; fails the run if it aborted.",
}


def trigger_doc(audit: bool) -> str:
    return (
        "Captures the sources' barrier and writes the pending checkpoint "
        + ("(marked: only its audit may complete it); " if audit else "; ")
        + "skips the run when min-pause or max-concurrent says no, or when no source "
        + "has new input (BATCHPOINT_SKIP_IDLE_EPOCHS)."
    )


def _graph_line(spec: PipelineSpec) -> str:
    parts = []
    for op in spec.topological_order():
        label = f"`{op.name}`"
        if op.kind is OperatorKind.SOURCE:
            label += " (source)"
        else:
            label += (
                f" ({op.kind.value}, parallelism {op.parallelism}, from {', '.join(op.inputs)})"
            )
        parts.append(label)
    return " → ".join(parts)


def _settings_table(deployment: AirflowDeployment, audit: bool, schedule: str) -> str:
    c = deployment.checkpoint
    rows = [
        ("schedule", schedule),
        ("timeout", f"{c.timeout:g}s"),
        ("min pause", f"{c.min_pause:g}s"),
        ("max concurrent", c.max_concurrent),
        ("tolerable failed checkpoints", c.tolerable_failed_checkpoints),
        ("retained checkpoints", c.num_retained),
        ("idle epochs", "skipped" if c.skip_idle else "run"),
        ("incremental checkpoints", _incremental(c)),
        (
            "storage",
            f"`{deployment.settings.root}` "
            f"(the connection `{deployment.storage_conn_id}` overrides it)",
        ),
        ("Spark", deployment.spark_description),
        ("audit (write-audit-publish)", "on" if audit else "off"),
    ]
    return "| setting | value |\n|---|---|\n" + "\n".join(f"| {k} | {v} |" for k, v in rows)


_UNITS = (("GiB", 30), ("MiB", 20), ("KiB", 10))


def _size(n: int) -> str:
    """`n` bytes in the largest binary unit that holds it whole, as the setting takes it."""
    for unit, shift in _UNITS:
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


def _incremental(c: CheckpointConfig) -> str:
    if c.changelog_chain == 0:
        return "off (every state written in full)"
    text = f"changelogs, up to {c.changelog_chain} layers"
    if c.changelog_min_bytes:
        text += f"; states under {_size(c.changelog_min_bytes)} written in full"
    return text


def operator_doc(name: str, kind: OperatorKind, inputs: tuple[str, ...], parallelism: int) -> str:
    return (
        f"Runs {kind.value} `{name}` (parallelism {parallelism}, reads {', '.join(inputs)}) "
        "for this run's checkpoint as a Spark job (BATCHPOINT_SPARK_MODE): align, restore "
        "state, process, snapshot, acknowledge (or decline)."
    )


def _audit_doc(audit: bool) -> str:
    if not audit:
        return ""
    return """
**Audited** (write-audit-publish): between `wait_for_acks` and `finalize`, `audit` runs
the pipeline's quality suites and checks on the checkpoint's state. Passing, the
checkpoint completes and publishes; failing, it is **ABORTED** with reason *quality gate*
(the report is stored beside it as `quality.json` and summarised in the task log),
nothing is published, the previous checkpoint stays the head, and it counts as a failed
checkpoint.
"""


def airflow_actions_doc(pipeline: str) -> str:
    """What Airflow's own buttons do to checkpoints: a checkpoint is a record in the
    pipeline's storage, which a run's or a task's state in Airflow does not change."""
    restore = f"`{pipeline}_restore`"
    return f"""\
#### What Airflow's actions do to checkpoints

A checkpoint is a record in the pipeline's storage, not a run's state: Airflow's actions
change what the scheduler runs next, never a checkpoint that completed.

- **Clear** a finished run: its tasks run again under the same run id as a *new*
  checkpoint on the input that arrived since the head (its barrier is taken now), not
  the old run's input again, so sinks still see every input once. To process past input
  again, restore the checkpoint before it ({restore}) and let the next runs re-read
  from there. Clearing a run whose checkpoint is still pending carries on with that one.
- **Mark failed** (a task or the run): a completed checkpoint stays COMPLETED, the head,
  its sinks published. To take it back, restore an earlier one ({restore} with its id).
  A running operator task marked failed stops its Spark job: the checkpoint misses its
  acks, and `cleanup` aborts it (at the latest at its deadline).
- **Pause**: no new run starts, and the runs in flight get no task scheduled, so a
  pending checkpoint waits for acks that cannot come and its deadline runs out (the
  pipeline's Checkpoints page says the DAG is paused, with each pending checkpoint's
  deadline). Unpause before the deadline and the run finishes; after it, the run (once
  unpaused) or `batchpoint gc` aborts it as expired, and the next run starts again from
  the head. Pausing does not stop the pipeline: the savepoint DAG's *Stop the pipeline
  afterwards* does.
- **Backfill**: every backfill run is one more checkpoint on the input there is now; a
  checkpoint does not read by logical date, so past intervals are not read again (with
  idle epochs skipped, a run finding no new input is skipped). To reprocess the past,
  restore an older checkpoint.
"""


def checkpoint_doc(
    pipeline: Pipeline,
    spec: PipelineSpec,
    deployment: AirflowDeployment,
    audit: bool = False,
    *,
    schedule: str,
) -> str:
    """`schedule`: how the DAG is scheduled, in words (schedules.RenderedSchedule.text)."""
    return f"""\
### Checkpoints of pipeline `{pipeline.name}`

Every run is one **epoch**: `trigger` records how far each source may be read (the
barrier), each operator task runs its Spark job on the input between the base
checkpoint's barrier and this one, and snapshots its state; `wait_for_acks` waits for
every subtask's acknowledgement and `finalize` makes the checkpoint **COMPLETED** and
publishes the sinks. Any failure aborts the checkpoint as a whole (`cleanup` says why);
the next run starts again from the last completed one, so sinks see every input exactly once.
{_audit_doc(audit)}
Graph: {_graph_line(spec)}

{_settings_table(deployment, audit, schedule)}

A run is *skipped* when the minimum pause or the concurrency limit says no, or when no
source has new input since the checkpoint it would build on ("idle epochs"); it *fails*
when the pipeline is FAILED after too many failed checkpoints (`batchpoint reset` or a
restore clears that), when the deploy is refused, or when the control record is lost or
damaged (`batchpoint repair`). See also `{pipeline.name}_savepoint` and `{pipeline.name}_restore`.

{airflow_actions_doc(pipeline.name)}"""


def savepoint_doc(pipeline: Pipeline, deployment: AirflowDeployment) -> str:
    return f"""\
### Savepoint of pipeline `{pipeline.name}`

Trigger with config. Runs one epoch as a **savepoint** (retained for ever, never
subsumed, not refused by the checkpoint schedule's limits), then exports it: every file
it references is copied under the target folder with relative paths, plus `_metadata`.
The folder is self-contained: move it anywhere and restore from it with
`{pipeline.name}_restore`. Savepoints are not audited, even when checkpoints are.

*Stop the pipeline afterwards* is Flink's stop-with-savepoint: the savepoint's
admission abandons the checkpoints pending (none of them completes after it), and the
pipeline's control record says it is stopped once the savepoint completes, so every
trigger is refused until `batchpoint resume` or a restore. It also pauses
`{pipeline.name}_checkpoint` through the REST API with the Airflow connection
`{deployment.api_conn_id}` (http: host, port, login, password), so the scheduler stops
creating runs; unpausing alone does not resume the pipeline.

The form submits as it is: an empty target is the default folder, an empty description
none. While this DAG is paused its run waits, queued: tick *Unpause on trigger*
(Airflow's form and the Checkpoints page's both offer it). Clearing a finished run takes
a new savepoint; marking it failed leaves a completed savepoint as it is.
"""


def restore_doc(pipeline: Pipeline, deployment: AirflowDeployment) -> str:
    if deployment.quality_gate_ref:
        gate = f"the quality gate `{deployment.quality_gate_ref}` must pass"
    else:
        gate = (
            "the quality gate would judge its state, but none is configured "
            "(`BATCHPOINT_QUALITY_GATE`), so only the files are checked"
        )
    return f"""\
### Restore pipeline `{pipeline.name}`

Trigger with config. `check` resolves the source (*latest*, a checkpoint id, or a
savepoint folder) and checks it: every referenced file must exist with its recorded size,
then {gate}; for *latest*, older checkpoints are tried when the newest fails.
`restore` then points the pipeline's head at it (pending checkpoints are aborted, sinks
rewound, a savepoint imported under a new id) and registers the new parallelism. The
next `{pipeline.name}_checkpoint` run continues from there.

The form submits as it is: its defaults restore the newest retained checkpoint that
passes the checks. Only turning the gate off asks for the typed confirmation. Marking a
restore run failed does not undo it: restore another checkpoint.

{restore_form_table(pipeline)}
"""
