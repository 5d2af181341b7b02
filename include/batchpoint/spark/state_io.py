"""Writing and reading keyed operator state from Spark, through the ObjectStore.

Spark here cannot reach S3 itself (no hadoop-aws), and the driver must never hold the
state, so every byte of state moves inside Spark tasks: a task streams its rows as
Arrow record batches into a local Parquet file, uploads it with the store, and hands
the driver only a small JSON handle per file. Reading is the mirror image: the driver
builds a one-row-per-file DataFrame of handles, and tasks download and stream the files.

The work is split by stage, and this module is the one place callers import from:

    shipping.py          the store on executors (a pickled store or a StoreRef)
    key_groups.py        Flink's key-group assignment as Spark columns
    state_writer.py      snapshot: one task per subtask writes files tiling its key groups
    state_reader.py      restore: one task per file, verified, filtered to the key groups asked
    state_read_tasks.py  what those tasks do on the executors
"""

from batchpoint.spark.key_groups import KEY_TYPES, key_group_column, subtask_column
from batchpoint.spark.shipping import StoreLike
from batchpoint.spark.state_reader import (
    DEFAULT_READ_BATCH_BYTES,
    DEFAULT_READ_BATCH_ROWS,
    SMALL_FILE_BYTES,
    ReadSpec,
    check_state_schema,
    read_keyed_state,
    read_keyed_state_for_parallelism,
    stored_schema,
)
from batchpoint.spark.state_writer import (
    DEFAULT_ROW_GROUP_BYTES,
    DEFAULT_TARGET_FILE_BYTES,
    SubtaskHook,
    SubtaskHooks,
    WriteSpec,
    unreferenced_files,
    write_keyed_state,
)
from batchpoint.storage import StoreRef

__all__ = [
    "DEFAULT_READ_BATCH_BYTES",
    "DEFAULT_READ_BATCH_ROWS",
    "DEFAULT_ROW_GROUP_BYTES",
    "DEFAULT_TARGET_FILE_BYTES",
    "KEY_TYPES",
    "SMALL_FILE_BYTES",
    "ReadSpec",
    "StoreLike",
    "StoreRef",
    "SubtaskHook",
    "SubtaskHooks",
    "WriteSpec",
    "check_state_schema",
    "key_group_column",
    "read_keyed_state",
    "read_keyed_state_for_parallelism",
    "stored_schema",
    "subtask_column",
    "unreferenced_files",
    "write_keyed_state",
]
