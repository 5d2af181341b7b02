"""The real side of the deploy model checker: one store, the code of the latest deploy
run by the public engine (`LocalEpochRunner`, `PipelineDriver.plan`, the restore,
savepoint, repair and resume use cases), and what a user reads back (states by uid
from the head's files, sinks through `batchpoint sink show`'s reader and the Iceberg
table)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from batchpoint.errors import BatchpointError, ConfigError, TriggerRefused
from batchpoint.ops.gates import GateChoice
from batchpoint.ops.local_epoch import LocalEpochRunner, take_savepoint
from batchpoint.ops.maintenance import gc, repair, resume
from batchpoint.ops.restore import restore
from batchpoint.ops.savepoints import dispose
from batchpoint.ops.sinks import show_sink
from batchpoint.protocol.checkpoint import CheckpointStatus
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.deploy_plan import DeployPlan
from batchpoint.protocol.pipeline import OperatorKind
from batchpoint.protocol.sinks import read_sink_table
from batchpoint.runtime.incremental import base_state_files
from batchpoint.runtime.restore_options import GateOptions
from batchpoint.settings import Settings
from batchpoint.storage import StoreRef
from support.deploy_model.build import build
from support.deploy_model.version import PIPELINE, SOURCE_ROOT, Version

Row = dict[str, Any]
#: The master of the checker's one Spark session (`batchpoint savepoint` joins it).
MASTER = "local[2,2]"
#: Three retained, changelog chains of up to 4 layers, GC without a grace period (the
#: steps run one after another: no late writer to wait for), failures never fatal.
CONFIG = CheckpointConfig(
    num_retained=3, tolerable_failed_checkpoints=10_000, changelog_chain=4, gc_grace=0.0
)


@dataclass
class Attempt:
    """What one epoch (or savepoint) attempt came to."""

    checkpoint_id: int | None = None  # None: refused at trigger
    completed: bool = False
    error: BaseException | None = None
    jobs: int = 0  # Spark jobs that ran from before the trigger to the end

    @property
    def refused(self) -> bool:
        return self.checkpoint_id is None


class World:
    def __init__(self, spark: Any, ref: StoreRef, config: CheckpointConfig = CONFIG) -> None:
        self.spark = spark
        self.ref = ref
        self.store = ref.open()
        self.config = config
        self.settings = Settings(
            root=ref.uri, store_options=dict(ref.options), checkpoint=config, spark_master=MASTER
        )
        self.version: Version | None = None
        self.runner: LocalEpochRunner | None = None
        self.files = 0

    # -- code and input ---------------------------------------------------------------

    def deploy(self, version: Version) -> None:
        self.version = version
        self.runner = LocalEpochRunner(build(version), self.ref, self.spark, self.config)

    @property
    def driver(self) -> Any:
        assert self.runner is not None, "deploy first"
        return self.runner.driver

    @property
    def coordinator(self) -> Any:
        return self.driver.coordinator

    def add_input(self, rows: list[Row]) -> None:
        data = "".join(json.dumps(r) + "\n" for r in rows).encode()
        self.store.put(f"{SOURCE_ROOT}/p0/e{self.files:05d}.jsonl", data)
        self.files += 1

    # -- the engine --------------------------------------------------------------------

    def spark_jobs(self) -> int:
        """The newest Spark job's id (+1): the tracker keeps only the newest jobs, so
        their count stops growing, their ids do not."""
        ids = self.spark.sparkContext.statusTracker().getJobIdsForGroup()
        return max(ids, default=-1) + 1

    def plan(self, checkpoint_id: int | None = None, allow: bool = False) -> DeployPlan:
        return self.driver.plan(checkpoint_id, allow_non_restored_state=allow)

    def epoch(self) -> Attempt:
        assert self.runner is not None
        jobs = self.spark_jobs()
        attempt = Attempt()
        try:
            result = self.runner.executor().run(self.runner.plan())
        except BatchpointError as exc:
            attempt.error = exc
        else:
            attempt.checkpoint_id = result.checkpoint_id
            attempt.error = result.error
            outcome = result.outcome
            attempt.completed = outcome is not None and outcome.status is CheckpointStatus.COMPLETED
        attempt.jobs = self.spark_jobs() - jobs
        return attempt

    def savepoint(self, folder: str, *, stop: bool) -> Attempt:
        """`batchpoint savepoint [--stop] --target folder`: an epoch, exported."""
        assert self.runner is not None
        jobs = self.spark_jobs()
        attempt = Attempt()
        try:
            exported = take_savepoint(self.runner.pipeline, self.settings, target=folder, stop=stop)
        except (TriggerRefused, ConfigError) as exc:  # refused before any checkpoint
            attempt.error = exc
        except BatchpointError as exc:
            attempt.error, attempt.checkpoint_id = exc, -1  # admitted, then failed
        else:
            attempt.checkpoint_id, attempt.completed = exported.checkpoint_id, True
        attempt.jobs = self.spark_jobs() - jobs
        return attempt

    def restore(self, source: int | str, allow: bool = False) -> int:
        """`batchpoint restore SOURCE --no-quality-gate`: the checkpoint restored to."""
        run = restore(
            self.driver,
            source,
            GateChoice(None, "no quality gate"),
            GateOptions(enabled=False),
            savepoint_roots=self.settings.savepoint_roots,
            allow_non_restored_state=allow,
        )
        if not run.restored:
            raise BatchpointError(run.plan.refusal())
        return run.checkpoint_id

    def import_folder(self, folder: str, progress: Any = None) -> int:
        completed = self.coordinator.savepoints.import_folder(
            self._location(folder), roots=self.settings.savepoint_roots, progress=progress
        )
        return completed.checkpoint_id

    def _location(self, folder: str) -> Any:
        from batchpoint.protocol.savepoint_paths import savepoint_location

        return savepoint_location(folder, self.store)

    def repair(self) -> str:
        return repair(self.coordinator, force=True).status

    def dispose(self, checkpoint_id: int) -> None:
        """`batchpoint savepoint dispose ID`: the pipeline lets go of a savepoint."""
        dispose(self.coordinator, checkpoint_id)

    def gc(self) -> str:
        report = gc(self.coordinator, self.coordinator.store)
        return (
            f"{len(report.deleted_files)} file(s) deleted, epochs dropped {report.dropped_epochs}"
        )

    def resume(self) -> None:
        resume(self.coordinator)

    def head(self) -> int | None:
        return self.coordinator.head.get().checkpoint_id

    def retained(self) -> list[int]:
        return list(self.coordinator.completed.retained_ids())

    # -- what a user reads -------------------------------------------------------------

    def state(self, op_uid: str, state_uid: str) -> list[Row]:
        """The head's rows of a state, found by uids, in the schema the head recorded."""
        from batchpoint.spark import keyed_io

        head = self.coordinator.completed.get(self.head())
        files = base_state_files(head, op_uid, state_uid)
        node = head.topology.node(OperatorKind.OPERATOR, op_uid)
        recorded = node.state(state_uid) if node is not None else None
        schema = recorded.arrow_schema() if recorded is not None else None
        if not files and schema is None:
            return []
        df = keyed_io.read_keyed(self.spark, self.ref, files, schema, f"{op_uid}/{state_uid}")
        return [r.asDict() for r in df.collect()]

    def sink(self, name: str) -> list[Row]:
        """The sink as `batchpoint sink show` reads it now (its table, when it has one)."""
        view = show_sink(self.coordinator, self.ref, name)
        # a table sink's table registers the staged files as they are: their reserved
        # columns (_key_group) too, which the manifest's reader leaves out
        return [
            {k: v for k, v in r.items() if not k.startswith("_")} for r in view.rows.to_pylist()
        ]

    def sink_manifest(self, uid: str) -> list[Row]:
        return read_sink_table(self.store, PIPELINE, uid).to_pylist()
