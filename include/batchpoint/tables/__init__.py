"""Sinks that are tables other engines query (Apache Iceberg, through pyiceberg).

The sink manifest stays the commit record of every sink (protocol/sinks.py): a table
sink's tasks stage plain Parquet files under the checkpoint (pre-commit), and once the
manifest publishes them, `TableSync` makes the table say the same thing with one table
commit per checkpoint, stamped with the pipeline, the checkpoint id and the restore
generation in the snapshot summary. A repeated sync finds its checkpoint there and
does nothing; a sync after a restore commits the restored checkpoint's content as a
copy. `read_table` reads a table as of any checkpoint (time travel by checkpoint id).

    binding.py  what a sink declares (`TableBinding`), and how the spec records it
    catalog.py  which catalog serves a binding, with the store's S3 settings as FileIO
    plan.py     what a sync must commit, from the table's position and the manifest
    iceberg.py  the pyiceberg adapter: create, position, commit, time travel, expire
    references.py  GC's view of the tables: the files every snapshot reads, which lag
"""

from batchpoint.tables.binding import TableBinding
from batchpoint.tables.plan import SyncPlan, SyncStep, TablePosition, plan_sync

__all__ = [
    "SyncPlan",
    "SyncStep",
    "TableBinding",
    "TablePosition",
    "plan_sync",
]
