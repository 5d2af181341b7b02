"""Spark side of batchpoint: the session, and keyed state moved by Spark tasks."""

from batchpoint.spark.key_groups import key_group_column
from batchpoint.spark.session import spark_session
from batchpoint.spark.state_reader import (
    ReadSpec,
    check_state_schema,
    read_keyed_state,
    read_keyed_state_for_parallelism,
    stored_schema,
)
from batchpoint.spark.state_writer import WriteSpec, unreferenced_files, write_keyed_state
from batchpoint.storage import StoreRef

__all__ = [
    "ReadSpec",
    "StoreRef",
    "WriteSpec",
    "check_state_schema",
    "key_group_column",
    "read_keyed_state",
    "read_keyed_state_for_parallelism",
    "spark_session",
    "stored_schema",
    "unreferenced_files",
    "write_keyed_state",
]
