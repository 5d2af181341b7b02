"""batchpoint's own state checks, beside the Great Expectations suites: things a suite
cannot express because they compare the state with something outside it (the metadata,
the source input). Every one computes with Spark on executors; only counts and a few
example rows come back to the driver.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from batchpoint.errors import BatchpointError, ConfigError
from batchpoint.protocol.checkpoint import CompletedCheckpoint, FileHandle
from batchpoint.quality.findings import Check, Finding
from batchpoint.quality.identity import StateId
from batchpoint.runtime.api import Pipeline
from batchpoint.sources.delta_table import DeltaTableSource
from batchpoint.sources.iceberg_table import IcebergTableSource
from batchpoint.sources.upstream import PipelineSinkSource
from batchpoint.state.format import FORMAT_VERSION, StateHandle, state_rows
from batchpoint.storage import StoreRef

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

#: Example rows shown in a finding.
EXAMPLES = 5


@dataclass(frozen=True)
class StateTarget:
    """One state of one operator in one checkpoint, as a check sees it: `operator` and
    `state` are the code's names (its schema and key are the code's), `state_id` its
    identity, by which the gate found it in the checkpoint (whatever it was called then)."""

    spark: SparkSession
    store_ref: StoreRef
    pipeline: Pipeline
    checkpoint: CompletedCheckpoint
    operator: str
    state: str
    handles: tuple[FileHandle, ...]
    max_parallelism: int
    df: DataFrame  # every row of the state, read by executors (persisted by the validator)
    state_id: StateId

    @property
    def key(self) -> str:
        """The state's label, `operator/state`: what a finding on it names."""
        return f"{self.operator}/{self.state}"

    @property
    def key_columns(self) -> tuple[str, ...]:
        return self.pipeline.operators[self.operator].key_columns

    @property
    def schema(self) -> pa.Schema:
        return self.pipeline.operators[self.operator].states[self.state]

    @property
    def format_version(self) -> int:
        """The state format of the files (one per state: one writer wrote them all)."""
        versions = {StateHandle.coerce(h).format for h in self.handles}
        if len(versions) > 1:
            raise BatchpointError(f"state {self.key} mixes file formats {sorted(versions)}")
        return versions.pop() if versions else FORMAT_VERSION

    def with_key_groups(self) -> DataFrame:
        """The state with its `_key_group` column, as stored (no re-hashing of keys)."""
        from batchpoint.spark import keyed_io, state_io

        return state_io.read_keyed_state(
            self.spark,
            self.store_ref,
            [StateHandle.coerce(h) for h in self.handles],
            state_io.ReadSpec(
                schema=keyed_io.spark_schema(self.schema),
                keep_key_group=True,
                max_parallelism=self.max_parallelism,
            ),
        )


@dataclass
class CheckResult:
    findings: list[Finding] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)  # JSON, kept in the report


class StateCheck(Protocol):
    name: str

    def run(self, target: StateTarget) -> CheckResult: ...


def count_rows(target: StateTarget) -> CheckResult:
    """Rows in the files against rows their handles record. Also what fills the
    validator's cache, so the suites that follow read the state from memory."""
    counted = target.df.count()
    recorded = state_rows([StateHandle.coerce(h) for h in target.handles])
    result = CheckResult(details={"rows": counted, "recorded_rows": recorded})
    if counted != recorded:
        result.findings.append(
            Finding(
                target.key,
                Check.ROW_COUNT,
                f"{counted} rows in its files, but the checkpoint's metadata records {recorded}",
            )
        )
    return result


def sample_key_groups(max_parallelism: int, count: int) -> list[int]:
    """`count` key groups spread evenly over 0..max_parallelism-1, so that a sample
    touches every subtask's files, and the same ones on every run."""
    count = max(1, min(count, max_parallelism))
    return sorted({i * max_parallelism // count for i in range(count)})


@dataclass(frozen=True)
class RecomputeSample:
    """Recompute the state of a deterministic sample of keys (those in a few key groups)
    from the source input up to the checkpoint's barrier, and compare.

    `recompute` turns the sampled keys' source rows into the rows the state should hold
    for them (with the state's key columns and `compare` columns); `source_key` names the
    source columns that hash like the state's key (the operator's key columns if None).
    A state that only records keys (a dedup set) compares keys alone: `compare=()`.
    """

    name: str
    source: str
    recompute: Callable[[DataFrame], DataFrame]
    compare: tuple[str, ...] = ()
    source_key: tuple[str, ...] | None = None
    key_groups: int = 16

    def declaration_problems(self, pipeline: Pipeline, operator: str) -> list[str]:
        """What makes this check unable to run on `operator`'s state of `pipeline`,
        found when the gate is built rather than as a failure of every candidate."""
        problems = []
        if self.source not in pipeline.sources:
            problems.append(
                f"no source '{self.source}' (sources: {', '.join(sorted(pipeline.sources))})"
            )
        keys = pipeline.operators[operator].key_columns
        if self.source_key is not None and len(self.source_key) != len(keys):
            problems.append(
                f"source_key names {len(self.source_key)} column(s) "
                f"({', '.join(self.source_key)}), the state's key has {len(keys)} "
                f"({', '.join(keys)}): name one source column per key column"
            )
        return problems

    def run(self, target: StateTarget) -> CheckResult:
        from pyspark.sql import functions as F

        from batchpoint.spark import state_io
        from batchpoint.state.format import KEY_GROUP_COLUMN, key_hash_of_format

        if problems := self.declaration_problems(target.pipeline, target.operator):
            raise ConfigError(f"check '{self.name}': " + "; ".join(problems))

        groups = sample_key_groups(target.max_parallelism, self.key_groups)
        keys = list(target.key_columns)
        state = (
            target.with_key_groups()
            .where(F.col(KEY_GROUP_COLUMN).isin(groups))
            .select(*keys, *self.compare)
        )
        events, placed_by, added = self._as_state_keys(self._source_rows(target), state, keys)
        # The sample's key groups are the state's stored ones: place the source's keys
        # with the hash of the format the state was written in.
        group = state_io.key_group_column(
            placed_by,
            target.max_parallelism,
            events.schema,
            key_hash_of_format(target.format_version),
        )
        sampled = events.where(group.isin(groups)).drop(*added)
        expected = self.recompute(sampled).select(
            *keys, *[F.col(c).alias(f"_expected_{c}") for c in self.compare]
        )
        joined, compared, differ = self._compare(state, expected, keys)
        details = {
            "source": self.source,
            "key_groups": groups,
            "keys_compared": compared,
            "keys_differing": differ,
        }
        result = CheckResult(details=details)
        if differ:
            examples = joined.where("_differs").limit(EXAMPLES).collect()
            shown = "; ".join(self._describe(row.asDict(), keys) for row in examples)
            result.findings.append(
                Finding(
                    target.key,
                    f"{Check.SAMPLE}:{self.name}",
                    f"{differ} of {compared} sampled keys (key groups {_groups(groups)}) differ "
                    f"from a recomputation from source '{self.source}' up to the checkpoint's "
                    f"barrier: {shown}",
                )
            )
        return result

    def _compare(
        self, state: DataFrame, expected: DataFrame, keys: Sequence[str]
    ) -> tuple[DataFrame, int, int]:
        """The state and the recomputation side by side, a `_differs` flag per key, and
        how many keys were compared and differ."""
        from pyspark.sql import functions as F

        joined = state.withColumn("_in_state", F.lit(True)).join(
            expected.withColumn("_in_expected", F.lit(True)), on=list(keys), how="full_outer"
        )
        differs = F.col("_in_state").isNull() | F.col("_in_expected").isNull()
        for column in self.compare:
            differs = differs | ~F.col(column).eqNullSafe(F.col(f"_expected_{column}"))
        joined = joined.withColumn("_differs", differs)
        totals = joined.agg(
            F.count(F.lit(1)).alias("keys"),
            F.sum(F.col("_differs").cast("int")).alias("differ"),
        ).first()
        assert totals is not None
        return joined, int(totals["keys"]), int(totals["differ"] or 0)

    def _as_state_keys(
        self, events: DataFrame, state: DataFrame, keys: Sequence[str]
    ) -> tuple[DataFrame, list[str], list[str]]:
        """The source rows with their keys as the state's key types, to place them by:
        Spark hashes a DECIMAL(38,0) id and the BIGINT the state stores it as apart, so
        a sample placed by the source's own types would pick other keys. A key the
        state's type cannot hold cannot be in the state: its rows are left out."""
        from pyspark.sql import functions as F

        source_keys = list(self.source_key or keys)  # as many: declaration_problems
        stored = {f.name: f.dataType for f in state.schema.fields}
        given = {f.name: f.dataType for f in events.schema.fields}
        placed_by, added = [], []
        for i, (source, key) in enumerate(zip(source_keys, keys, strict=True)):
            if source not in given or given[source] == stored[key]:
                placed_by.append(source)
                continue
            # a legal cast that rounds (a double to a bigint) places the row where the
            # rounded key's state is: the recomputation decides what the row becomes
            placed = f"_bp_sample_key_{i}"
            events = events.withColumn(placed, F.col(f"`{source}`").try_cast(stored[key]))
            events = events.where(F.col(placed).isNotNull() | F.col(f"`{source}`").isNull())
            placed_by.append(placed)
            added.append(placed)
        return events, placed_by, added

    def _source_rows(self, target: StateTarget) -> DataFrame:
        from batchpoint.spark import keyed_io

        source = target.pipeline.sources[self.source]
        files = source.files(target.store_ref, with_schema=True)
        barrier = target.checkpoint.pending.barrier.get(source.uid, {})  # barriers: by uid
        if source.reads_changes:
            assert isinstance(files, PipelineSinkSource | IcebergTableSource | DeltaTableSource)
            from batchpoint.spark.upstream_io import read_upstream

            # from nothing: an append sink's every row, a snapshot sink's content (+I)
            read = files.read_between(None, barrier)
            return read_upstream(target.spark, source.store_ref(target.store_ref), source, read)
        splits = files.files_between(None, barrier)
        return keyed_io.read_source(
            target.spark, source.store_ref(target.store_ref), source, splits
        )

    def _describe(self, row: dict[str, Any], keys: Sequence[str]) -> str:
        key = ", ".join(f"{k}={row[k]!r}" for k in keys)
        if row["_in_state"] is None:
            return f"{key} is missing from the state"
        if row["_in_expected"] is None:
            return f"{key} is in the state but not in the source"
        diffs = [
            f"{c} {row[c]!r} (expected {row[f'_expected_{c}']!r})"
            for c in self.compare
            if row[c] != row[f"_expected_{c}"]
        ]
        return f"{key}: " + ", ".join(diffs)


def _groups(groups: Sequence[int]) -> str:
    return ", ".join(map(str, groups[:8])) + (", ..." if len(groups) > 8 else "")
