"""What the Checkpoints pages read (ui.py serves them): each pipeline's status and a
page of its history, one checkpoint, a Data Docs file. Read off the event loop (storage
calls block); each pipeline is read on its own, so one pipeline's damaged records are a
finding in its own row and page, never an error that hides every other pipeline
(invariant 11)."""

import dataclasses
from collections.abc import Callable, Collection
from typing import Any

from batchpoint.airflow.dag_names import dag_ids
from batchpoint.airflow.ui_lineage import checkpoint_lineage, histories
from batchpoint.airflow.ui_schedule import paused_dags, pending_deadlines
from batchpoint.errors import BatchpointError
from batchpoint.ops.overview import (
    DAMAGE,
    PipelineOverview,
    checkpoint_page,
    control_of,
    history_page,
    page_summary,
    pipeline_overview,
)
from batchpoint.ops.restore_history import recent_restores
from batchpoint.ops.runs import checkpoint_of_run
from batchpoint.protocol.checkpoint import CheckpointType
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.pipeline_ports import PipelineHistory
from batchpoint.runtime.cascade_plan import downstream_order
from batchpoint.settings import Settings
from batchpoint.storage.base import ObjectStore
from batchpoint.storage.redaction import redact_uri

#: The history read for a pipeline's status on the index (its newest checkpoints).
OVERVIEW_PAGE = 20

SettingsSource = Callable[[], Settings]
PipelineNames = Callable[[], list[str]]
#: Which of these DAGs are paused (Airflow's database, in the api-server).
PausedDags = Callable[[list[str]], set[str]]


def _deployment_code(name: str) -> Any:
    """The pipeline's code, loaded by its ref as the DAGs load it (airflow/links.py)."""
    from batchpoint.airflow.config import AirflowDeployment
    from batchpoint.airflow.hooks import cached_pipeline

    for ref in AirflowDeployment.from_env().pipeline_refs:
        pipeline = cached_pipeline(ref)
        if pipeline.name == name:
            return pipeline
    raise BatchpointError(f"no pipeline ref of this deployment names '{name}'")


def deploy_plan_of(settings: Settings, code: Callable[[str], Any], name: str) -> dict[str, Any]:
    """The deploy plan of the code on the head, for the pipeline's page: its text, or
    why there is none (the code cannot be loaded here, a record cannot be read)."""
    from batchpoint.ops.deploy import deploy_plan

    try:
        pipeline = code(name)
    except Exception as exc:  # a user's module: whatever it raises, the page still shows
        return {"error": f"the pipeline's code could not be loaded here: {exc}"}
    try:
        plan = deploy_plan(pipeline, settings)
    except BatchpointError as exc:
        return {"error": f"no deploy plan: {exc}"}
    return {"text": plan.render(), "deployable": plan.deployable}


class CheckpointPages:
    """The records behind the pages, read off the event loop (storage calls block)."""

    def __init__(
        self,
        settings: SettingsSource,
        pipelines: PipelineNames,
        code: Callable[[str], Any] = _deployment_code,
        paused: PausedDags = paused_dags,
    ) -> None:
        self._settings = settings
        self._pipelines = pipelines
        self._code = code
        self._paused = paused

    def names(self) -> list[str]:
        return self._pipelines()

    def open(self, name: str) -> tuple[Settings, ObjectStore, PipelineHistory]:
        settings = self._settings()
        store = settings.store_ref.open()
        return settings, store, CheckpointCoordinator(store, name, settings.checkpoint)

    def pipelines(self, names: list[str]) -> list[dict[str, Any]]:
        """Each pipeline's entry, each read on its own: one whose records cannot be read
        is a row that says why, beside the others."""
        return [self._entry(name) for name in names]

    def _entry(self, name: str) -> dict[str, Any]:
        try:
            return self.pipeline(name, OVERVIEW_PAGE)[0]
        except DAMAGE as exc:
            return _about(self._settings(), name, PipelineOverview.unreadable(name, str(exc)))

    def pipeline(
        self, name: str, limit: int, before: int | None = None, with_plan: bool = False
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The pipeline with its status, and a page of its history (the newest page
        also tells the status, so it is read once for both); `with_plan`: the deploy
        plan of the code on the head too (the pipeline's own page). A record that
        cannot be read is a finding in the status; the rest still shows."""
        settings, store, c = self.open(name)
        newest, damage = history_page(c, None, limit)
        page = newest
        if before is not None:
            page, more = history_page(c, before, limit)
            damage += more
        about = _about(settings, name, pipeline_overview(c, store, newest, damage))
        if with_plan:
            about["deploy_plan"] = deploy_plan_of(settings, self._code, name)
        held = set(c.quarantine.ids())
        restored: dict[int, list[dict[str, Any]]] = {}
        for event in recent_restores(c, control_of(c)):
            restored.setdefault(event.checkpoint_id, []).append(event.to_json())
        rows = [
            {
                **s.to_json(),
                "quarantined": s.checkpoint_id in held,
                "restores": restored.get(s.checkpoint_id, []),
            }
            for s in page.checkpoints
        ]
        return about, {
            "pipeline": name,
            "checkpoints": rows,
            "older": page.older,
            "summary": page_summary(page.checkpoints),
        }

    def downstream(self, name: str) -> list[str]:
        """The deployed pipelines downstream of this one, which a cascade would consider;
        none when a pipeline's code cannot be loaded here (the form still shows)."""
        try:
            return downstream_order(name, {n: self._code(n) for n in self.names()})
        except Exception:  # a user's module: whatever it raises, the page still shows
            return []

    def paused(self, name: str) -> set[str]:
        """The pipeline's DAGs that are paused: a form says so, or unpauses on trigger."""
        return self._paused(list(dag_ids(name).values()))

    def pending_deadlines(self, name: str) -> dict[int, float]:
        """Each pending checkpoint's deadline: what a paused checkpoint DAG lets run out."""
        _, _, c = self.open(name)
        return pending_deadlines(c)

    def checkpoint(
        self, name: str, checkpoint_id: int, readable: Collection[str] | None = None
    ) -> dict[str, Any]:
        """One checkpoint, with its lineage across the pipelines on the same storage
        (only about the `readable` ones, when given: ui_lineage.py)."""
        settings, store, c = self.open(name)
        detail = checkpoint_page(c, checkpoint_id).to_json()
        history_of = histories(store, settings.checkpoint)
        lineage = checkpoint_lineage(store, history_of, name, checkpoint_id, readable)
        return {**detail, "lineage": lineage}

    def checkpoint_of_run(self, name: str, run_id: str, kind: CheckpointType) -> int | None:
        _, _, c = self.open(name)
        return checkpoint_of_run(c, run_id, kind)

    def data_docs(self, name: str, checkpoint_id: int, path: str) -> bytes | None:
        """A file of a Data Docs site the gate stored beside the checkpoint, or None."""
        _, _, c = self.open(name)
        return c.reports.data_docs_file(checkpoint_id, path)


def _about(settings: Settings, name: str, overview: PipelineOverview) -> dict[str, Any]:
    """A pipeline's entry: its status, configuration and DAGs, and where it is stored
    (redacted: a root may carry a token, invariant 13)."""
    return {
        "pipeline": name,
        "root": redact_uri(settings.root),
        "head": overview.head,
        "overview": overview.to_json(),
        "config": dataclasses.asdict(settings.checkpoint),
        "dags": dag_ids(name),
    }
