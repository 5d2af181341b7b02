"""`batchpoint plan`: the deploy plan of the code on the base the next trigger builds on
(the newest checkpoint still pending, else the head), a named checkpoint or a savepoint
folder (protocol/deploy_plan.py), as the trigger and the restore would judge it. Reads
only: nothing is written, no Spark job runs."""

from __future__ import annotations

from batchpoint.errors import ConfigError
from batchpoint.protocol.deploy_plan import DeployPlan
from batchpoint.protocol.savepoint_paths import savepoint_location
from batchpoint.protocol.savepoints import confined, located_checkpoint, read_savepoint_of
from batchpoint.runtime.api import Pipeline
from batchpoint.runtime.deploy import plan_on
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.settings import Settings


def deploy_plan(
    pipeline: Pipeline,
    settings: Settings,
    *,
    checkpoint_id: int | None = None,
    savepoint: str | None = None,
    allow_non_restored_state: bool = False,
) -> DeployPlan:
    """The plan of deploying `pipeline` on checkpoint `checkpoint_id` (default: the
    next trigger's base; a named one the restore refuses: RestoreRefused) or on the
    savepoint folder `savepoint` (confined to the savepoint roots)."""
    if checkpoint_id is not None and savepoint is not None:
        raise ConfigError("give either a checkpoint or a savepoint, not both")
    driver = PipelineDriver(pipeline, settings.store_ref, settings.checkpoint)
    if savepoint is None:
        return driver.plan(checkpoint_id, allow_non_restored_state=allow_non_restored_state)
    location = confined(
        savepoint_location(savepoint, driver.store, settings.store_options),
        settings.savepoint_roots,
    )
    metadata = read_savepoint_of(pipeline.name, location)
    return plan_on(
        pipeline,
        location.store,
        located_checkpoint(location, metadata),
        driver.current_spec(),
        allow_non_restored_state=allow_non_restored_state,
        tables=driver.store,
    )
