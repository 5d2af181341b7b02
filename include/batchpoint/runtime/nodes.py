"""What a pipeline is made of: its sources, operators (with their states) and sinks, as
the authoring API (`batchpoint.runtime.api`) declares them and the runtime reads them.
Each node has a uid, its identity across deploys (default: its name)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from batchpoint.errors import PipelineSpecError
from batchpoint.protocol.layout import check_name
from batchpoint.protocol.sink_manifest import SinkMode
from batchpoint.runtime.schemas import arrow_schema
from batchpoint.runtime.state_conform import conform_state
from batchpoint.state.evolution.types import default_problem
from batchpoint.storage import ObjectStore, StoreRef
from batchpoint.storage.redaction import Secret
from batchpoint.tables.binding import TableBinding

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from batchpoint.sources.delta_table import DeltaTableSource
    from batchpoint.sources.files import PartitionedFileSource
    from batchpoint.sources.iceberg_table import IcebergTableSource
    from batchpoint.sources.upstream import PipelineSinkSource, UpstreamBinding


class OperatorContext:
    """What an operator function sees for one epoch: its input and restored state as
    Spark DataFrames, and where to put its new state. With `declared` (state name ->
    its declared schema), what the function sets is checked against the declaration
    when it is set (runtime/state_conform.py)."""

    def __init__(
        self,
        spark: SparkSession,
        checkpoint_id: int,
        operator: str,
        inputs: Mapping[str, DataFrame],
        states: Mapping[str, DataFrame],
        properties: Mapping[str, Any],
        declared: Mapping[str, pa.Schema] | None = None,
    ) -> None:
        self.spark = spark
        self.checkpoint_id = checkpoint_id
        self.operator = operator
        self.properties = properties
        self._inputs = dict(inputs)
        self._states = dict(states)
        self._declared = dict(declared or {})
        self._new_states: dict[str, DataFrame] = {}

    def input(self, name: str | None = None) -> DataFrame:
        if name is None:
            if len(self._inputs) != 1:
                raise PipelineSpecError(
                    f"operator '{self.operator}' has inputs {sorted(self._inputs)}: name one"
                )
            return next(iter(self._inputs.values()))
        if name not in self._inputs:
            raise PipelineSpecError(
                f"operator '{self.operator}' has no input '{name}' (inputs: {sorted(self._inputs)})"
            )
        return self._inputs[name]

    def state(self, name: str) -> DataFrame:
        if name not in self._states:
            raise PipelineSpecError(
                f"operator '{self.operator}' declares no state '{name}' "
                f"(states: {sorted(self._states)})"
            )
        return self._states[name]

    def set_state(self, name: str, df: DataFrame) -> None:
        self.state(name)  # validates the name
        if name in self._declared:
            what = f"operator '{self.operator}', state '{name}'"
            df = conform_state(df, self._declared[name], what)
        self._new_states[name] = df

    def new_state(self, name: str) -> DataFrame:
        """The state to snapshot: what the function set, else the restored state."""
        return self._new_states.get(name, self._states[name])


OperatorFn = Callable[[OperatorContext], "DataFrame | None"]


@dataclass(frozen=True)
class State:
    """A keyed state's declaration: its schema and how it evolves across deploys.

    `uid` keeps the state's identity when it is renamed (default: its name). `defaults`
    fills a column the schema gained, for rows written before it; `dropped` names columns
    the code removed on purpose; `migrate` turns the old DataFrame into the new one, once,
    in the first epoch after a deploy whose change no rule migrates. `value=True` is
    Flink's ValueState: at most one row per key (default: Flink's ListState, any number),
    so a changelog is a plain keyed join; a second row for a key fails the epoch."""

    schema: pa.Schema | StructType | str
    uid: str | None = None
    defaults: Mapping[str, Any] = field(default_factory=dict)
    dropped: tuple[str, ...] = ()
    migrate: Callable[[DataFrame], DataFrame] | None = None
    value: bool = False


def _with_uid(node: Any) -> None:
    """A node's uid defaults to its name (frozen dataclasses: set once, here)."""
    if not node.uid:
        object.__setattr__(node, "uid", node.name)


@dataclass(frozen=True)
class SourceDef:
    name: str
    root: str  # key prefix under the storage root: <root>/<partition>/<files>
    format: str
    schema: pa.Schema
    key_columns: tuple[str, ...] = ()  # columns that must never be null
    # Where the files are when not under the pipeline's storage root: a landing bucket,
    # another endpoint and credentials (`root` is then relative to it, usually "").
    location: StoreRef | None = None
    table: TableBinding | None = None  # an Iceberg or Delta table read incrementally
    uid: str = ""  # the source's identity across deploys (default: its name)
    # another pipeline's sink on the same storage, read exactly once (sources/upstream.py)
    upstream: UpstreamBinding | None = None
    # a table read as its changes, each row with its `_row_kind`
    changes: bool = False

    def __post_init__(self) -> None:
        _with_uid(self)

    @property
    def reads_changes(self) -> bool:
        """Whether its rows carry a `_row_kind` (sources/upstream.py's changes)."""
        return self.upstream is not None or self.changes

    def store_ref(self, default: StoreRef) -> StoreRef:
        return self.location or default

    def files(
        self, default: StoreRef | ObjectStore, *, with_schema: bool = False
    ) -> PartitionedFileSource | IcebergTableSource | DeltaTableSource | PipelineSinkSource:
        """The source's files (or table, or upstream sink), on its own storage or else
        on `default` (the pipeline's)."""
        store = self.location.open() if self.location else _opened(default)
        schema = self.schema if with_schema else None
        if self.upstream is not None:
            from batchpoint.sources.upstream import PipelineSinkSource

            return PipelineSinkSource(store, self.upstream, schema=schema)
        if self.table is not None:
            key = self.key_columns if self.changes else None
            if self.table.is_delta:
                from batchpoint.sources.delta_table import DeltaTableSource

                return DeltaTableSource(store, self.table, schema=schema, key=key)
            from batchpoint.sources.iceberg_table import IcebergTableSource

            return IcebergTableSource(store, self.table, schema=schema, key=key)
        from batchpoint.sources.files import PartitionedFileSource

        return PartitionedFileSource(store, self.root, self.format, schema=schema)

    @property
    def uri(self) -> str:
        if self.upstream is not None:
            return f"pipeline:{self.upstream.pipeline}/{self.upstream.sink}"
        if self.table is not None and self.table.is_delta:
            return f"delta:{self.table.identifier}"
        if self.table is not None:
            return f"iceberg:{self.table.catalog}/{self.table.identifier}"
        return self.location.uri if self.location else self.root


def _state_decl(operator: str, state: str, declared: pa.Schema | StructType | str | State) -> State:
    """The declaration with its schema as a pyarrow schema and its uid filled in; a
    default that does not fit its column, or a column both declared and marked
    dropped, is refused here, at declaration, rather than at the first deploy."""
    what = f"operator '{operator}': state '{state}'"
    decl = declared if isinstance(declared, State) else State(declared)
    schema = arrow_schema(decl.schema, what)
    both = sorted(set(decl.dropped) & set(schema.names))
    if both:
        raise PipelineSpecError(f"{what}: column(s) {both} are marked dropped but still declared")
    for column, value in decl.defaults.items():
        if column in schema.names and (problem := default_problem(value, schema.field(column))):
            raise PipelineSpecError(f"{what}: the default of column '{column}': {problem}")
    if decl.migrate is not None and not callable(decl.migrate):
        raise PipelineSpecError(f"{what}: migrate= must be a function of the old DataFrame")
    if not isinstance(decl.value, bool):
        raise PipelineSpecError(f"{what}: value= must be True or False")
    return replace(
        decl,
        schema=schema,
        uid=decl.uid or state,
        defaults=dict(decl.defaults),
        dropped=tuple(decl.dropped),
    )


def _opened(store: StoreRef | ObjectStore) -> ObjectStore:
    return store.open() if isinstance(store, StoreRef) else store


def expand_variables(value: str | Secret, what: str) -> str | Secret:
    """`${VAR}` in a source's storage option: the secret stays in the environment, and
    what it expands to is a Secret (masked in every repr, message and log line; the
    registered spec never holds source options at all)."""
    if isinstance(value, Secret):
        return value

    def variable(match: re.Match[str]) -> str:
        name = match[1]
        if name not in os.environ:
            raise PipelineSpecError(f"{what}: environment variable {name} is not set")
        return os.environ[name]

    expanded, count = re.subn(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", variable, str(value))
    return Secret(expanded) if count else expanded


@dataclass(frozen=True)
class OperatorDef:
    name: str
    fn: OperatorFn
    inputs: tuple[str, ...]
    key_columns: tuple[str, ...]
    states: Mapping[str, pa.Schema]
    parallelism: int
    max_parallelism: int
    output_schema: pa.Schema | None = None
    uid: str = ""  # the operator's identity across deploys (default: its name)
    # name -> the state's declaration, its schema a pa.Schema and its uid filled in
    state_decls: Mapping[str, State] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _with_uid(self)

    def state_uid(self, state: str) -> str:
        decl = self.state_decls.get(state)
        return decl.uid if decl is not None and decl.uid else state

    def value_state(self, state: str) -> bool:
        """Whether the state is declared to hold at most one row per key."""
        decl = self.state_decls.get(state)
        return decl is not None and decl.value


@dataclass(frozen=True)
class SinkDef:
    name: str
    inputs: tuple[str, ...]
    key_columns: tuple[str, ...]
    mode: SinkMode
    parallelism: int
    max_parallelism: int
    fn: OperatorFn | None = None  # optional last transformation before staging
    table: TableBinding | None = None  # published as an Iceberg table, not only a manifest
    uid: str = ""  # the sink's identity across deploys (default: its name)

    def __post_init__(self) -> None:
        _with_uid(self)


def state_declarations(
    operator: str, states: Mapping[str, pa.Schema | StructType | str | State]
) -> dict[str, State]:
    """Each state as `_state_decl` gives it; state uids are unique within their operator."""
    decls: dict[str, State] = {}
    for name, given in states.items():
        what = f"operator '{operator}': state '{name}'"
        decl = _state_decl(operator, name, given)
        check_name(decl.uid or name, f"{what} uid")
        twin = next((n for n, d in decls.items() if d.uid == decl.uid), None)
        if twin is not None:
            raise PipelineSpecError(
                f"{what} has uid '{decl.uid}', already the uid of state '{twin}'"
            )
        decls[name] = decl
    return decls
