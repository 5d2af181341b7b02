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

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from batchpoint.errors import PipelineSpecError
from batchpoint.protocol.layout import check_name
from batchpoint.protocol.pipeline import OperatorKind, OperatorSpec, PipelineSpec
from batchpoint.runtime.nodes import (
    OperatorContext,
    OperatorDef,
    OperatorFn,
    SinkDef,
    SinkMode,
    SourceDef,
    State,
    expand_variables,
    state_declarations,
)
from batchpoint.runtime.schemas import arrow_schema
from batchpoint.sources.upstream import ROW_KIND_COLUMN, UpstreamBinding
from batchpoint.storage import StoreRef
from batchpoint.storage.redaction import Secret
from batchpoint.tables.binding import DEFAULT_CATALOG, TableBinding

if TYPE_CHECKING:
    from pyspark.sql.types import StructType


def _location(
    name: str, root: str, storage_options: Mapping[str, str | Secret] | None
) -> StoreRef | None:
    """A source's storage of its own: a root URI and its options (None: the pipeline's)."""
    if "://" in root:
        what = f"source '{name}'"
        options = {k: expand_variables(v, what) for k, v in (storage_options or {}).items()}
        return StoreRef.of(root.rstrip("/"), options)
    if storage_options:
        raise PipelineSpecError(
            f"source '{name}': storage_options need a root URI of the source's own "
            "(s3://bucket/prefix or file:///path)"
        )
    return None


def _check_changes(
    name: str, binding: TableBinding | None, key: Sequence[str], schema: pa.Schema
) -> None:
    if binding is None or not key:
        raise PipelineSpecError(
            f"source '{name}': changes=True reads a table's changes (Iceberg, or Delta with "
            "table_format='delta') by its key: give table= and key="
        )
    if ROW_KIND_COLUMN in schema.names:
        raise PipelineSpecError(
            f"source '{name}': '{ROW_KIND_COLUMN}' is the row kind changes=True adds; "
            "leave it out of the schema"
        )


def _table_binding(
    what: str, table: str | TableBinding | None, catalog: str, table_format: str
) -> TableBinding | None:
    """A sink's or source's table (`what`: "sink 'name'"). A catalog or format other
    than the default given with no table name (or beside a `TableBinding`, which names
    its own) would be dropped silently: a plain sink or a files source, or an Iceberg
    table where Delta was meant. Said as a mistake instead (the defaults passed through
    by a builder whose table is optional change nothing)."""
    given = [
        f"{k}={v!r}"
        for k, v, default in (
            ("catalog", catalog, DEFAULT_CATALOG),
            ("table_format", table_format, "iceberg"),
        )
        if v != default
    ]
    if table is None and given:
        raise PipelineSpecError(
            f"{what}: {' and '.join(given)} given without table=: name the table "
            "(table='namespace.table'), or leave them out"
        )
    if isinstance(table, TableBinding) and given:
        raise PipelineSpecError(
            f"{what}: {' and '.join(given)} given beside a TableBinding, which "
            "names its own: set them in the TableBinding"
        )
    if isinstance(table, str):
        return TableBinding(table, catalog, table_format)
    return table


__all__ = [
    "OperatorContext",
    "OperatorDef",
    "OperatorFn",
    "Pipeline",
    "SinkDef",
    "SinkMode",
    "SourceDef",
    "State",
]


@dataclass
class Pipeline:
    name: str
    max_parallelism: int = 128
    properties: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, SourceDef] = field(default_factory=dict)
    operators: dict[str, OperatorDef] = field(default_factory=dict)
    sinks: dict[str, SinkDef] = field(default_factory=dict)
    # What the code drops on purpose (drop_state, drop_operator, drop_sink, drop_source):
    # scheduled epochs may leave the base's state of these unrestored
    # (docs/design/evolution.md).
    dropped_states: set[tuple[str, str]] = field(default_factory=set)
    dropped_operators: set[str] = field(default_factory=set)
    dropped_sinks: set[str] = field(default_factory=set)
    dropped_sources: set[str] = field(default_factory=set)

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
        table_format: str = "iceberg",
        uid: str | None = None,
        upstream: str | None = None,
        sink: str | None = None,
        changes: bool = False,
    ) -> SourceDef:
        """`schema`: a pyarrow schema, a Spark StructType or a DDL string. `root` is a
        prefix under the pipeline's storage, or a URI of its own (s3://landing/payments,
        file:///data/in) reached with `storage_options` (the S3 store's: endpoint_url,
        region, access_key_id, ...; `${VAR}` takes a value from the environment). `table`
        ("namespace.table" of `catalog`) reads an Iceberg table incrementally instead:
        each epoch the rows appended since its base checkpoint's snapshot
        (`table_format="delta"`: the Delta table of that name, by version). `uid` keeps
        the source's offsets across a rename (default: its name). `upstream` and `sink`
        read another pipeline's sink on the same storage instead, exactly once: an
        append sink's new rows, a snapshot sink's changes, each row with its `_row_kind`
        (+I, -U, +U, -D; sources/upstream.py). `changes=True` reads a `table` that other
        engines overwrite or merge into the same way, as its changes by `key` (a Delta
        table's through its change data feed where it has one)."""
        self._check_new(name)
        self._check_uid(uid or name, self.sources.values(), f"source '{name}'")
        if sum(map(bool, (root, table, upstream))) != 1:
            raise PipelineSpecError(
                f"source '{name}': give one of root (files), table or upstream (a pipeline)"
            )
        if bool(upstream) != bool(sink):
            raise PipelineSpecError(f"source '{name}': upstream= and sink= go together")
        schema = arrow_schema(schema, f"source '{name}'")
        missing = [c for c in key if c not in schema.names]
        if missing:
            raise PipelineSpecError(f"source '{name}': key columns {missing} not in its schema")
        location = _location(name, root, storage_options)
        if location is not None:
            root = ""
        binding = _table_binding(f"source '{name}'", table or None, catalog, table_format)
        if binding is not None:
            format = binding.format
        if changes:
            _check_changes(name, binding, key, schema)
        feed = self._upstream(name, upstream, sink, schema)
        if feed is not None:
            format = "pipeline"
        source = SourceDef(
            name, root.strip("/"), format, schema, tuple(key), location, binding, uid or name,
            feed, changes,
        )  # fmt: skip
        self.sources[name] = source
        return source

    def _upstream(
        self, name: str, upstream: str | None, sink: str | None, schema: pa.Schema
    ) -> UpstreamBinding | None:
        if not upstream or not sink:
            return None
        check_name(upstream, f"source '{name}': upstream pipeline")
        check_name(sink, f"source '{name}': upstream pipeline '{upstream}': sink")
        if upstream == self.name:
            raise PipelineSpecError(f"source '{name}': a pipeline cannot read its own sink")
        if ROW_KIND_COLUMN in schema.names:
            raise PipelineSpecError(
                f"source '{name}': '{ROW_KIND_COLUMN}' is the row kind a pipeline source "
                "adds; leave it out of the schema"
            )
        return UpstreamBinding(upstream, sink, self.name)

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
            decls = state_declarations(op_name, states or {})
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
        table_format: str = "iceberg",
        uid: str | None = None,
    ) -> SinkDef:
        """`table` ("namespace.table"): the sink is also an Iceberg table of `catalog`
        (`table_format="delta"`: the Delta table <root>/delta/<namespace>/<table>), one
        commit per checkpoint, rewound by restores (see batchpoint.tables). `uid`
        keeps the sink's staged output and manifest across a rename (default: its name)."""
        self._check_new(name)
        self._check_uid(uid or name, self.sinks.values(), f"sink '{name}'")
        try:
            sink_mode = SinkMode(mode)
        except ValueError:
            raise PipelineSpecError(
                f"sink '{name}': mode {mode!r} is not one of {[m.value for m in SinkMode]}"
            ) from None
        binding = _table_binding(f"sink '{name}'", table, catalog, table_format)
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

    def drop_source(self, uid: str) -> None:
        """Declare that this code drops source `uid`, and the offsets it has read up to,
        on purpose: a source of that uid added back later reads every file again."""
        self.dropped_sources.add(uid)

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
        """The graph the coordinator knows; `parallelism` overrides (rescaling). Each
        operator and sink records the parallelism its code declares as well."""
        parallelism = dict(parallelism or {})
        ops: list[OperatorSpec] = [
            OperatorSpec(s.name, OperatorKind.SOURCE, key_columns=s.key_columns, uid=s.uid)
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
                    code_parallelism=op.parallelism,
                    uid=op.uid,
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
                    code_parallelism=sink.parallelism,
                    uid=sink.uid,
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
