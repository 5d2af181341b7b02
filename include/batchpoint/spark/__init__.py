"""Spark side of batchpoint: the session, and keyed state moved by Spark tasks."""

from batchpoint.spark.session import spark_session
from batchpoint.spark.state_io import (
    StoreRef,
    check_state_schema,
    key_group_column,
    read_keyed_state,
    read_keyed_state_for_parallelism,
    stored_schema,
    unreferenced_files,
    write_keyed_state,
)

__all__ = [
    "StoreRef",
    "check_state_schema",
    "key_group_column",
    "read_keyed_state",
    "read_keyed_state_for_parallelism",
    "spark_session",
    "stored_schema",
    "unreferenced_files",
    "write_keyed_state",
]
