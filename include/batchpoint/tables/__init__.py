"""Sinks that are tables other engines query: Apache Iceberg (pyiceberg) or Delta Lake
(delta-rs, the `deltalake` package), as a sink's `table_format` says.

The sink manifest stays the commit record of every sink (protocol/sinks.py): a table
sink's tasks stage plain Parquet files under the checkpoint (pre-commit), and once the
manifest publishes them, `TableSync` makes the table say the same thing with one table
commit per checkpoint, stamped with the pipeline, the checkpoint id and the restore
generation (Iceberg: in the snapshot summary; Delta: in the commit info, and in a
SetTransaction whose version is the table's position). A repeated sync finds its
checkpoint there and does nothing; a sync after a restore commits the restored
checkpoint's content as a copy. An adapter's `read(N)` reads the table as of checkpoint
N (time travel by checkpoint id: `batchpoint sink show --checkpoint N`).
docs/design/tables.md compares the two formats feature by feature.

    binding.py  what a sink declares (`TableBinding`: identifier, catalog, format), and
                how the spec records it
    catalog.py  which catalog serves an Iceberg binding, with the store's S3 settings as FileIO
    plan.py     what a sync must commit, from the table's position and the manifest
    sync.py     `TableSync`, format-neutral: plan, pin each step against GC, commit
                through a `SinkTableAdapter`, plan again after a conflict
    iceberg.py  the pyiceberg adapter: create, position, commit, time travel, expire
    delta.py    the delta-rs adapter: the staged files copied into the table's folder,
                one commit with a SetTransaction per checkpoint, time travel by version,
                expiry of the copies only dropped checkpoints read
    delta_location.py  where a Delta table is (by path, under <root>/tables/) and the
                delta-rs options that reach it (conditional put on S3, no lock)
    service.py  open a sink's table in its format, sync a pipeline's tables, the sink
                an existing table names as its writer
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
