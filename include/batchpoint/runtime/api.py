"""The authoring API, in the spirit of Flink's CheckpointedFunction.

    pipeline = Pipeline("payments", max_parallelism=128)
    pipeline.source("events", root="sources/payments", format="jsonl", schema=SCHEMA)

    @pipeline.operator(inputs=["events"], key=["account_id"], parallelism=2,
                       states={"balances": BALANCE_SCHEMA})
    def balances(ctx: OperatorContext) -> DataFrame:
        ...  # ctx.input("events"), ctx.state("balances"), ctx.set_state("balances", df)
        return changed_rows  # this epoch's output, for downstream operators and sinks

    pipeline.sink("balances_table", inputs=["balances"], key=["account_id"], mode="snapshot",
                  table="payments.balances")  # an Iceberg table (optional)

Nobody writes a storage path or an ack: the runtime does, from the declarations.
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from batchpoint.errors import PipelineSpecError
from batchpoint.protocol.layout import check_name
from batchpoint.protocol.pipeline import OperatorKind, OperatorSpec, PipelineSpec
from batchpoint.redaction import Secret
from batchpoint.runtime.schemas import arrow_schema
from batchpoint.storage import ObjectStore, StoreRef
from batchpoint.tables.binding import DEFAULT_CATALOG, TableBinding

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from batchpoint.sources.files import PartitionedFileSource
    from batchpoint.sources.iceberg_table import IcebergTableSource


class SinkMode(enum.StrEnum):
    APPEND = "append"  # readers see every published epoch's rows
    SNAPSHOT = "snapshot"  # readers see the newest published epoch's rows only


class OperatorContext:
    """What an operator function sees for one epoch: its input and restored state as
    Spark DataFrames, and where to put its new state."""

    def __init__(
        self,
        spark: SparkSession,
        checkpoint_id: int,
        operator: str,
        inputs: Mapping[str, DataFrame],
        states: Mapping[str, DataFrame],
        properties: Mapping[str, Any],
    ) -> None:
        self.spark = spark
        self.checkpoint_id = checkpoint_id
        self.operator = operator
        self.properties = properties
        self._inputs = dict(inputs)
        self._states = dict(states)
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
    in the first epoch after a deploy whose change no rule migrates."""

    schema: pa.Schema | StructType | str
    uid: str | None = None
    defaults: Mapping[str, Any] = field(default_factory=dict)
    dropped: tuple[str, ...] = ()
    migrate: Callable[[DataFrame], DataFrame] | None = None


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
    table: TableBinding | None = None  # an Iceberg table read incrementally, not files
    uid: str = ""  # the source's identity across deploys (default: its name)

    def __post_init__(self) -> None:
        _with_uid(self)

    def store_ref(self, default: StoreRef) -> StoreRef:
        return self.location or default

    def files(
        self, default: StoreRef | ObjectStore, *, with_schema: bool = False
    ) -> PartitionedFileSource | IcebergTableSource:
        """The source's files (or table), on its own storage or else on `default` (the
        pipeline's)."""
        store = self.location.open() if self.location else _opened(default)
        schema = self.schema if with_schema else None
        if self.table is not None:
            from batchpoint.sources.iceberg_table import IcebergTableSource

            return IcebergTableSource(store, self.table, schema=schema)
        from batchpoint.sources.files import PartitionedFileSource

        return PartitionedFileSource(store, self.root, self.format, schema=schema)

    @property
    def uri(self) -> str:
        if self.table is not None:
            return f"iceberg:{self.table.catalog}/{self.table.identifier}"
        return self.location.uri if self.location else self.root


def _opened(store: StoreRef | ObjectStore) -> ObjectStore:
    return store.open() if isinstance(store, StoreRef) else store


def _expand(value: str | Secret, what: str) -> str | Secret:
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


@dataclass
class Pipeline:
    name: str
    max_parallelism: int = 128
    properties: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, SourceDef] = field(default_factory=dict)
    operators: dict[str, OperatorDef] = field(default_factory=dict)
    sinks: dict[str, SinkDef] = field(default_factory=dict)
    # What the code drops on purpose (drop_state, drop_operator, drop_sink): scheduled
    # epochs may leave the base's state of these unrestored (docs/design/evolution.md).
    dropped_states: set[tuple[str, str]] = field(default_factory=set)
    dropped_operators: set[str] = field(default_factory=set)
    dropped_sinks: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        check_name(self.name, "pipeline")

    # -- declaration ----------------------------------------------------------------------

    def source(
        self,
        name: str,
        *,
        root: str = "",
        schema: pa.Schema | StructType | str,
        format: str = "jsonl",
        key: Sequence[str] = (),
        storage_options: Mapping[str, str | Secret] | None = None,
        table: str | None = None,
        catalog: str = DEFAULT_CATALOG,
        uid: str | None = None,
    ) -> SourceDef:
        """`schema`: a pyarrow schema, a Spark StructType or a DDL string. `root` is a
        prefix under the pipeline's storage, or a URI of its own (s3://landing/payments,
        file:///data/in) reached with `storage_options` (the S3 store's: endpoint_url,
        region, access_key_id, ...; `${VAR}` takes a value from the environment). `table`
        ("namespace.table" of `catalog`) reads an Iceberg table incrementally instead:
        each epoch the rows appended since its base checkpoint's snapshot. `uid` keeps
        the source's offsets across a rename (default: its name)."""
        self._check_new(name)
        self._check_uid(uid or name, self.sources.values(), f"source '{name}'")
        if bool(root) == bool(table):
            raise PipelineSpecError(f"source '{name}': give either root (files) or table")
        schema = arrow_schema(schema, f"source '{name}'")
        missing = [c for c in key if c not in schema.names]
        if missing:
            raise PipelineSpecError(f"source '{name}': key columns {missing} not in its schema")
        location = None
        if "://" in root:
            what = f"source '{name}'"
            options = {k: _expand(v, what) for k, v in (storage_options or {}).items()}
            location = StoreRef.of(root.rstrip("/"), options)
            root = ""
        elif storage_options:
            raise PipelineSpecError(
                f"source '{name}': storage_options need a root URI of the source's own "
                "(s3://bucket/prefix or file:///path)"
            )
        binding = TableBinding(table, catalog) if table else None
        if binding is not None:
            format = "iceberg"
        source = SourceDef(
            name, root.strip("/"), format, schema, tuple(key), location, binding, uid or name
        )
        self.sources[name] = source
        return source

    def operator(
        self,
        name: str | None = None,
        *,
        inputs: Sequence[str],
        key: Sequence[str],
        states: Mapping[str, pa.Schema | StructType | str | State] | None = None,
        parallelism: int = 1,
        max_parallelism: int | None = None,
        uid: str | None = None,
    ) -> Callable[[OperatorFn], OperatorFn]:
        """`states`: name -> schema (pyarrow, Spark StructType or DDL string) or a
        `State` (schema, uid, evolution). `uid` keeps the operator's state across a
        rename (default: its name)."""

        def register(fn: OperatorFn) -> OperatorFn:
            op_name = name or fn.__name__
            self._check_new(op_name)
            self._check_uid(uid or op_name, self.operators.values(), f"operator '{op_name}'")
            decls = _state_decls(op_name, states or {})
            schemas = {state: decl.schema for state, decl in decls.items()}
            for state_name, schema in schemas.items():
                check_name(state_name, f"operator '{op_name}': state")
                missing = [c for c in key if c not in schema.names]
                if missing:
                    raise PipelineSpecError(
                        f"operator '{op_name}': state '{state_name}' lacks key columns {missing}"
                    )
            self.operators[op_name] = OperatorDef(
                op_name,
                fn,
                tuple(inputs),
                tuple(key),
                schemas,
                parallelism,
                max_parallelism or self.max_parallelism,
                uid=uid or op_name,
                state_decls=decls,
            )
            return fn

        return register

    def sink(
        self,
        name: str,
        *,
        inputs: Sequence[str],
        key: Sequence[str],
        mode: SinkMode | str = SinkMode.APPEND,
        parallelism: int = 1,
        max_parallelism: int | None = None,
        fn: OperatorFn | None = None,
        table: str | TableBinding | None = None,
        catalog: str = DEFAULT_CATALOG,
        uid: str | None = None,
    ) -> SinkDef:
        """`table` ("namespace.table"): the sink is also an Iceberg table of `catalog`,
        one commit per checkpoint, rewound by restores (see batchpoint.tables). `uid`
        keeps the sink's staged output and manifest across a rename (default: its name)."""
        self._check_new(name)
        self._check_uid(uid or name, self.sinks.values(), f"sink '{name}'")
        try:
            sink_mode = SinkMode(mode)
        except ValueError:
            raise PipelineSpecError(
                f"sink '{name}': mode {mode!r} is not one of {[m.value for m in SinkMode]}"
            ) from None
        binding = TableBinding(table, catalog) if isinstance(table, str) else table
        taken = [s.name for s in self.sinks.values() if binding and s.table == binding]
        if taken:
            raise PipelineSpecError(
                f"sink '{name}': {binding} is already the table of sink '{taken[0]}'"
            )
        sink = SinkDef(
            name,
            tuple(inputs),
            tuple(key),
            sink_mode,
            parallelism,
            max_parallelism or self.max_parallelism,
            fn,
            binding,
            uid or name,
        )
        self.sinks[name] = sink
        return sink

    def drop_state(self, operator_uid: str, state_uid: str) -> None:
        """Declare that this code drops a state on purpose: scheduled epochs may then
        leave the base's state `state_uid` of operator `operator_uid` unrestored."""
        self.dropped_states.add((operator_uid, state_uid))

    def drop_operator(self, uid: str) -> None:
        """Declare that this code drops operator `uid` (and all its state) on purpose."""
        self.dropped_operators.add(uid)

    def drop_sink(self, uid: str) -> None:
        """Declare that this code drops sink `uid` on purpose."""
        self.dropped_sinks.add(uid)

    def _check_uid(self, uid: str, taken: Iterable[Any], what: str) -> None:
        """A uid is checked like a name, and unique among the nodes of its kind."""
        check_name(uid, f"pipeline '{self.name}': {what} uid")
        for node in taken:
            if node.uid == uid:
                raise PipelineSpecError(
                    f"pipeline '{self.name}': {what} has uid '{uid}', already the uid of "
                    f"'{node.name}'"
                )

    def _check_new(self, name: str) -> None:
        check_name(name, f"pipeline '{self.name}': operator")
        if name in self.sources or name in self.operators or name in self.sinks:
            raise PipelineSpecError(f"pipeline '{self.name}': '{name}' is declared twice")

    # -- the protocol's view --------------------------------------------------------------

    def spec(self, parallelism: Mapping[str, int] | None = None) -> PipelineSpec:
        """The graph the coordinator knows; `parallelism` overrides (rescaling)."""
        parallelism = dict(parallelism or {})
        ops: list[OperatorSpec] = [
            OperatorSpec(s.name, OperatorKind.SOURCE, key_columns=s.key_columns)
            for s in self.sources.values()
        ]
        for op in self.operators.values():
            ops.append(
                OperatorSpec(
                    op.name,
                    OperatorKind.OPERATOR,
                    op.inputs,
                    parallelism.pop(op.name, op.parallelism),
                    op.max_parallelism,
                    op.key_columns,
                    tuple(op.states),
                )
            )
        for sink in self.sinks.values():
            ops.append(
                OperatorSpec(
                    sink.name,
                    OperatorKind.SINK,
                    sink.inputs,
                    parallelism.pop(sink.name, sink.parallelism),
                    sink.max_parallelism,
                    sink.key_columns,
                    properties={
                        "mode": sink.mode.value,
                        **(sink.table.to_properties() if sink.table else {}),
                    },
                )
            )
        if parallelism:
            raise PipelineSpecError(
                f"pipeline '{self.name}': cannot set parallelism of unknown {sorted(parallelism)}"
            )
        return PipelineSpec(self.name, tuple(ops))

    def node(self, name: str) -> SourceDef | OperatorDef | SinkDef:
        for table in (self.sources, self.operators, self.sinks):
            if name in table:
                return table[name]
        raise PipelineSpecError(f"pipeline '{self.name}' has no operator, source or sink '{name}'")


def _state_decls(
    operator: str, states: Mapping[str, pa.Schema | StructType | str | State]
) -> dict[str, State]:
    """Each state as a `State` whose schema is a pa.Schema and whose uid is set; state
    uids are unique within their operator."""
    decls: dict[str, State] = {}
    for name, given in states.items():
        what = f"operator '{operator}': state '{name}'"
        decl = given if isinstance(given, State) else State(given)
        uid = decl.uid or name
        check_name(uid, f"{what} uid")
        twin = next((n for n, d in decls.items() if d.uid == uid), None)
        if twin is not None:
            raise PipelineSpecError(f"{what} has uid '{uid}', already the uid of state '{twin}'")
        decls[name] = State(
            arrow_schema(decl.schema, what),
            uid,
            dict(decl.defaults),
            tuple(decl.dropped),
            decl.migrate,
        )
    return decls
