"""One subtask's part of a keyed write, inside a Spark task: its sorted rows streamed
into local Parquet files that tile its key-group range (or a part of it), each uploaded
with the store and described by a small handle for the driver."""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from batchpoint.spark.shipping import ShippedStore
from batchpoint.state.format import (
    CHANGE_COLUMN,
    CHANGE_ROW,
    KEY_GROUP_COLUMN,
    StateError,
    StateFileWriter,
    StateHandle,
)
from batchpoint.state.keygroups import KeyGroupRange, key_group_range_for_subtask
from batchpoint.state.keys import state_file_key
from batchpoint.state.schemas import StateNotAsDeclared
from batchpoint.storage import ObjectStore

if TYPE_CHECKING:
    from batchpoint.spark.state_writer import WriteSpec


@dataclass(frozen=True)
class _TaskWrite:
    """What each Spark task of a write gets: the spec, the store, and the file schema
    computed once on the driver."""

    spec: WriteSpec
    store: ShippedStore
    file_schema: pa.Schema
    fingerprint: str
    spark_schema: str
    required: tuple[str, ...] = ()  # state columns declared not null

    @property
    def stored_schema(self) -> pa.Schema:
        # Files without `_key_group` (a table sink's data files, which a table format adds
        # as they are: its schema is the user's columns only). The handles keep the ranges.
        if not self.spec.plain:
            return self.file_schema
        return self.file_schema.remove(self.file_schema.get_field_index(KEY_GROUP_COLUMN))


class _SubtaskWriter:
    """Writes one subtask's sorted rows as one or more files that tile its key-group
    range. A file is rolled only between two key groups, so ranges never overlap."""

    def __init__(
        self,
        task: _TaskWrite,
        store: ObjectStore,
        subtask: int,
        task_attempt: str,
        key_groups: KeyGroupRange | None = None,
    ):
        self.task = task
        self.spec = spec = task.spec
        self.store = store
        self.subtask = subtask
        self.task_attempt = task_attempt
        own = key_group_range_for_subtask(spec.max_parallelism, spec.parallelism, subtask)
        # A part of the subtask's range (an aligned write's unit, or a gap the driver
        # fills): its files are numbered from its offset in the range, so that the parts
        # of one subtask written by one task attempt never share a name.
        self.range = key_groups or own
        self._first_part = (self.range.start - own.start) * 1000
        self.handles: list[StateHandle] = []
        self._tmpdir = Path(tempfile.mkdtemp(prefix="bp-state-"))
        self._file: StateFileWriter | None = None
        self._file_start = self.range.start
        self._last_group = -1

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        batch = self._conform(batch)
        groups = batch.column(KEY_GROUP_COLUMN).to_numpy()
        self._check_order(groups)
        # Decide on rolling every row group's worth of rows, not only between Spark's
        # batches, so a file overshoots its target by at most one row group.
        step = max(1, self.spec.row_group_bytes * batch.num_rows // max(1, batch.nbytes))
        for offset in range(0, batch.num_rows, step):
            self._write_sorted(batch.slice(offset, step), groups[offset : offset + step])

    def _write_sorted(self, batch: pa.RecordBatch, groups: np.ndarray) -> None:
        while batch.num_rows:
            if self._file is not None and self._file.bytes_written >= self.spec.target_file_bytes:
                # Rows of the key group already in the file must stay with it.
                cut = int(np.searchsorted(groups, self._last_group, side="right"))
                if cut < len(groups):
                    self._open().write(self._stored(batch.slice(0, cut)))
                    self._roll(end=int(groups[cut]) - 1)
                    batch, groups = batch.slice(cut), groups[cut:]
                    continue
            self._open().write(self._stored(batch))
            self._last_group = int(groups[-1])
            break

    def finish(self) -> list[StateHandle]:
        self._open()  # an empty subtask still writes a file: restores see its range covered
        self._roll(end=self.range.end)
        return self.handles

    def abort(self) -> None:
        # Best effort: a task killed outright leaves its files to the protocol's cleanup.
        if self._file is not None:
            with contextlib.suppress(Exception):
                self._file.abort()
        with contextlib.suppress(Exception):
            self.store.delete_many(h.path for h in self.handles)
        self.cleanup()

    def cleanup(self) -> None:
        shutil.rmtree(self._tmpdir, ignore_errors=True)

    def _conform(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        # Spark may send large_string or another time zone; every file of a state gets
        # exactly the schema computed once on the driver.
        schema = self.task.file_schema
        columns = [batch.column(f.name).cast(f.type) for f in schema]
        self._check_required(batch)
        return pa.RecordBatch.from_arrays(columns, schema=schema)

    def _check_required(self, batch: pa.RecordBatch) -> None:
        """No null in a column the state declares not null (in a changelog, on the rows
        that hold a key's rows: a CHANGE_GONE row holds only its key)."""
        if not self.task.required:
            return
        rows = batch
        if self.spec.layer:
            rows = batch.filter(pc.equal(batch.column(CHANGE_COLUMN), CHANGE_ROW))
        for name in self.task.required:
            nulls = rows.column(name).null_count
            if nulls:
                raise StateNotAsDeclared(
                    f"{self.spec.what or self.spec.stream}: column '{name}' is declared not "
                    f"null, and the function set null in {nulls} row(s) (subtask "
                    f"{self.subtask}): fill it in the function, or declare it nullable"
                )

    def _stored(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        if not self.spec.plain:
            return batch
        return batch.drop_columns([KEY_GROUP_COLUMN])

    def _check_order(self, groups: np.ndarray) -> None:
        low, high = int(groups[0]), int(groups[-1])
        if low < self._last_group or (len(groups) > 1 and bool(np.any(np.diff(groups) < 0))):
            raise StateError(
                f"state '{self.spec.stream}' subtask {self.subtask}: rows are not sorted "
                "by key group (the Spark plan lost sortWithinPartitions)"
            )
        if low not in self.range or high not in self.range:
            raise StateError(
                f"state '{self.spec.stream}': partition {self.subtask} got key groups "
                f"[{low}, {high}] outside its range {self.range} (the Spark plan did not keep "
                "repartitionById's partitioning)"
            )

    def _open(self) -> StateFileWriter:
        if self._file is None:
            part = len(self.handles)
            self._file = StateFileWriter(
                self._tmpdir / f"part-{part:05d}.parquet",
                self.task.stored_schema,
                row_group_bytes=self.spec.row_group_bytes,
            )
        return self._file

    def _roll(self, end: int) -> None:
        assert self._file is not None
        kgr = KeyGroupRange(self._file_start, end)
        written = self._file.close({"batchpoint.key_group_range": json.dumps(kgr.to_json())})
        self._file = None
        spec = self.spec
        key = state_file_key(
            spec.base_key, spec.stream, self.subtask, spec.attempt,
            self._first_part + len(self.handles), self.task_attempt,
        )  # fmt: skip
        try:
            info = self.store.upload_file(key, written.local_path)
        finally:
            written.local_path.unlink(missing_ok=True)
        if info.size != written.size:
            raise StateError(f"state file '{key}': uploaded {info.size} bytes of {written.size}")
        self.handles.append(
            StateHandle(
                path=key,
                size=written.size,
                sha256=written.sha256,
                rows=written.rows,
                key_group_range=kgr,
                name=spec.stream,
                schema_fingerprint=self.task.fingerprint,
                subtask=self.subtask,
                parallelism=spec.parallelism,
                max_parallelism=spec.max_parallelism,
                task_attempt=self.task_attempt,
                spark_schema=self.task.spark_schema,
                layer=spec.layer,
                net_rows=written.net_rows if spec.layer else None,
                key_columns=spec.key_columns if spec.layer else (),
            )
        )
        self._file_start = end + 1
