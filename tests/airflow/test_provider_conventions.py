"""The operators, the ack sensor and its trigger take their arguments as the Amazon
provider's do: the storage connection is `aws_conn_id` (`storage_conn_id`, its old name,
still works with a deprecation warning), and the sensor's `deferrable` defaults to
Airflow's `[operators] default_deferrable`, while the DAG factory always says which."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest

from batchpoint.airflow.dag_factory import build_pipeline_dags
from batchpoint.airflow.operators import (
    CheckpointCleanupOperator,
    FinalizeCheckpointOperator,
    SparkOperatorJob,
    TriggerCheckpointOperator,
)
from batchpoint.airflow.sensors import CheckpointAckSensor
from batchpoint.airflow.triggers import CheckpointAckTrigger
from demo.payments import build_pipeline

pytestmark = pytest.mark.airflow

REF = "demo.payments:pipeline"
ENV = {"BATCHPOINT_ROOT": "file:///tmp/bp-conventions", "BATCHPOINT_SPARK_REMOTE": "sc://s:15002"}


def tasks_with(conn_argument: dict[str, str]) -> list:
    return [
        TriggerCheckpointOperator(task_id="trigger", pipeline_ref=REF, **conn_argument),
        FinalizeCheckpointOperator(task_id="finalize", pipeline_ref=REF, **conn_argument),
        CheckpointCleanupOperator(task_id="cleanup", pipeline_ref=REF, **conn_argument),
        CheckpointAckSensor(task_id="wait", pipeline="payments", **conn_argument),
    ]


def test_every_task_takes_aws_conn_id():
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        for task in tasks_with({"aws_conn_id": "bp_aws"}):
            assert task.aws_conn_id == "bp_aws" and task.hook.aws_conn_id == "bp_aws", task
        default = tasks_with({})
    assert {task.aws_conn_id for task in default} == {"batchpoint_storage"}


def test_storage_conn_id_is_a_deprecated_alias():
    for task_class in (TriggerCheckpointOperator, FinalizeCheckpointOperator):
        with pytest.warns(DeprecationWarning, match="storage_conn_id is deprecated"):
            task = task_class(task_id="t", pipeline_ref=REF, storage_conn_id="bp_old")
        assert (task.aws_conn_id, task.storage_conn_id, task.hook.aws_conn_id) == ("bp_old",) * 3
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="disagree"):
        CheckpointAckSensor(task_id="w", pipeline="p", aws_conn_id="a", storage_conn_id="b")


def test_the_trigger_takes_aws_conn_id_and_reads_its_old_kwargs():
    trigger = CheckpointAckTrigger("payments", 7, 1234.5, aws_conn_id="bp_aws")
    assert trigger.serialize()[1]["aws_conn_id"] == "bp_aws"
    assert "storage_conn_id" not in trigger.serialize()[1]
    # kwargs a triggerer stored before the rename
    old = {"pipeline": "payments", "checkpoint_id": 7, "deadline": 1234.5}
    with pytest.warns(DeprecationWarning):
        again = CheckpointAckTrigger(**old, storage_conn_id="bp_old", poll_interval=1.0)
    assert again.aws_conn_id == again.hook.aws_conn_id == "bp_old"


def test_the_dag_factory_passes_aws_conn_id():
    env = {**ENV, "BATCHPOINT_STORAGE_CONN_ID": "bp_deployed"}
    from batchpoint.airflow.config import AirflowDeployment

    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # the old name is never used
        dags = build_pipeline_dags(build_pipeline(), REF, AirflowDeployment.from_env(env))
    for dag in dags.values():
        reaching = [t for t in dag.tasks if hasattr(t, "aws_conn_id")]
        assert reaching and {t.aws_conn_id for t in reaching} == {"bp_deployed"}, dag.dag_id
    assert isinstance(dags["payments_checkpoint"].get_task("operators.balances"), SparkOperatorJob)


SENSOR_DEFAULTS = textwrap.dedent(
    """
    import json
    from batchpoint.airflow.config import AirflowDeployment
    from batchpoint.airflow.dag_factory import build_pipeline_dags
    from batchpoint.airflow.sensors import CheckpointAckSensor
    from demo.payments import build_pipeline

    factory = {}
    for mode in ("deferrable", "reschedule", "poke"):
        env = {**ENV, "BATCHPOINT_ACK_SENSOR_MODE": mode}
        dags = build_pipeline_dags(build_pipeline(), REF, AirflowDeployment.from_env(env))
        factory[mode] = dags["payments_checkpoint"].get_task("wait_for_acks").deferrable
    sensor = CheckpointAckSensor(task_id="w", pipeline="p")
    print(json.dumps({"sensor": sensor.deferrable, "factory": factory}))
    """
)


@pytest.mark.parametrize("default_deferrable", [True, False])
def test_the_sensor_follows_airflows_default_and_the_dags_say_which(default_deferrable):
    # The default is read when the sensor's module is imported: a fresh interpreter each.
    env = {**os.environ, "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": str(default_deferrable)}
    script = f"ENV = {ENV!r}\nREF = {REF!r}\n" + SENSOR_DEFAULTS
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["sensor"] is default_deferrable
    # whatever Airflow's default, the DAGs defer exactly in the deferrable mode
    assert seen["factory"] == {"deferrable": True, "reschedule": False, "poke": False}
