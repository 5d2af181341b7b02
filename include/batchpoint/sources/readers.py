"""Parse one source file (JSON lines, CSV or Parquet) into a table of a declared schema.

The declared schema is the contract: every column it names is read and cast to its type,
other columns are dropped, a column it marks `nullable=False` must be present and never
null (key columns are declared that way), a nullable column may be absent (read as nulls).

pyarrow does the parsing, fast and in bulk, but its errors name a row *within a parse
block* at best. So when a text file fails, a second, slow pass with Python's own json/csv
modules re-reads it to find the first offending line and column; that pass runs only on
the error path, so good files pay nothing for it.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from batchpoint.sources.errors import SourceDataError

FORMATS = ("jsonl", "csv", "parquet")

_INTEGER = re.compile(r"[+-]?\d+")


@dataclass(frozen=True)
class _Finding:
    problem: str
    line: int | None = None
    row: int | None = None
    column: str | None = None


class _Problem(Exception):
    def __init__(self, finding: _Finding) -> None:
        super().__init__(finding.problem)
        self.finding = finding


def read_table(handle: BinaryIO, fmt: str, schema: pa.Schema, uri: str) -> pa.Table:
    """Read a whole file from a seekable binary handle; raise SourceDataError naming `uri`."""
    parse, diagnose = _FORMATS[fmt]
    try:
        if fmt != "parquet" and _is_blank(handle):
            # An empty text file is a valid (if pointless) append; pyarrow calls it an error.
            return schema.empty_table()
        return _conform(parse(handle, schema), schema)
    except _Problem as problem:
        found = problem.finding
        if diagnose is not None:
            handle.seek(0)
            found = diagnose(handle, schema) or found
        raise SourceDataError(
            uri, found.problem, line=found.line, row=found.row, column=found.column
        ) from None


def _is_blank(handle: BinaryIO) -> bool:
    handle.seek(0)
    try:
        while block := handle.read(1 << 16):
            if block.strip():
                return False
        return True
    finally:
        handle.seek(0)


def _arrow_problem(exc: BaseException) -> _Problem:
    # pyarrow's "in row N" counts from the start of a parse block, not of the file.
    message = re.sub(r"\s+in row \d+\s*$", "", str(exc).strip())
    return _Problem(_Finding(message))


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    missing = [f.name for f in schema if not f.nullable and f.name not in table.column_names]
    if missing:
        found = ", ".join(table.column_names) or "none"
        raise _Problem(
            _Finding(f"missing required column(s) {', '.join(map(repr, missing))} (found: {found})")
        )
    columns = []
    for field in schema:
        if field.name not in table.column_names:
            columns.append(pa.nulls(table.num_rows, field.type))
            continue
        if len(table.schema.get_all_field_indices(field.name)) > 1:
            raise _Problem(_Finding("the column appears more than once", column=field.name))
        column = table.column(field.name)
        try:
            column = column.cast(field.type, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise _Problem(
                _Finding(f"cannot read as {field.type}: {exc}", column=field.name)
            ) from None
        if not field.nullable and column.null_count:
            row = _first_null(column)
            raise _Problem(
                _Finding(
                    f"required column '{field.name}' is null or missing", row=row, column=field.name
                )
            )
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=schema)


def _first_null(column: pa.ChunkedArray) -> int:
    offset = 0
    for chunk in column.chunks:
        if chunk.null_count:
            return offset + chunk.is_null().to_pylist().index(True)
        offset += len(chunk)
    return -1  # unreachable: only called when null_count > 0


# -- JSON lines -------------------------------------------------------------------------


def _parse_jsonl(handle: BinaryIO, schema: pa.Schema) -> pa.Table:
    options = pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    try:
        return pa_json.read_json(handle, parse_options=options)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise _arrow_problem(exc) from None


def _diagnose_jsonl(handle: BinaryIO, schema: pa.Schema) -> _Finding | None:
    for line, raw in enumerate(handle, start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except ValueError as exc:  # also UnicodeDecodeError
            return _Finding(f"not valid JSON: {exc}", line=line)
        if not isinstance(record, dict):
            return _Finding(f"expected a JSON object, found {type(record).__name__}", line=line)
        for field in schema:
            value = record.get(field.name)
            if value is None:
                if field.nullable:
                    continue
                state = "null" if field.name in record else "missing"
                return _Finding(
                    f"required column '{field.name}' is {state}", line=line, column=field.name
                )
            if not _json_fits(value, field.type):
                return _Finding(
                    f"value {json.dumps(value)} is not a valid {field.type}",
                    line=line,
                    column=field.name,
                )
    return None


def _json_fits(value: object, type_: pa.DataType) -> bool:
    if pa.types.is_integer(type_):
        return isinstance(value, int) and not isinstance(value, bool)
    if pa.types.is_floating(type_):
        return isinstance(value, int | float) and not isinstance(value, bool)
    if pa.types.is_string(type_) or pa.types.is_large_string(type_):
        return isinstance(value, str)
    if pa.types.is_boolean(type_):
        return isinstance(value, bool)
    return True  # no cheap check; pyarrow's own message will have to do


# -- CSV --------------------------------------------------------------------------------


def _csv_convert_options(schema: pa.Schema) -> pa_csv.ConvertOptions:
    # Only an empty, unquoted field is null: pyarrow's default list would turn an account
    # named "NA" or "null" into a missing key.
    return pa_csv.ConvertOptions(
        column_types={field.name: field.type for field in schema},
        null_values=[""],
        strings_can_be_null=True,
        quoted_strings_can_be_null=False,
    )


def _parse_csv(handle: BinaryIO, schema: pa.Schema) -> pa.Table:
    try:
        return pa_csv.read_csv(handle, convert_options=_csv_convert_options(schema))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise _arrow_problem(exc) from None


def _diagnose_csv(handle: BinaryIO, schema: pa.Schema) -> _Finding | None:
    text = io.TextIOWrapper(handle, encoding="utf-8", newline="")
    reader = csv.reader(text)
    try:
        header = next(reader, None)
        if header is None:
            return None
        positions = {name: index for index, name in enumerate(header)}
        for row in reader:
            if not row:
                continue  # pyarrow skips empty lines too
            if len(row) != len(header):
                return _Finding(
                    f"expected {len(header)} fields as in the header, found {len(row)}",
                    line=reader.line_num,
                )
            found = _check_csv_row(row, positions, schema)
            if found is not None:
                return _Finding(found.problem, line=reader.line_num, column=found.column)
        return None
    except (csv.Error, UnicodeDecodeError) as exc:
        return _Finding(f"not valid CSV: {exc}", line=reader.line_num + 1)
    finally:
        text.detach()  # the caller owns the binary handle


def _check_csv_row(row: list[str], positions: dict[str, int], schema: pa.Schema) -> _Finding | None:
    for field in schema:
        index = positions.get(field.name)
        if index is None:
            continue
        value = row[index]
        if value == "":
            if not field.nullable:
                return _Finding(f"required column '{field.name}' is empty", column=field.name)
        elif not _text_fits(value, field.type):
            return _Finding(f"value {value!r} is not a valid {field.type}", column=field.name)
    return None


def _text_fits(value: str, type_: pa.DataType) -> bool:
    if pa.types.is_integer(type_):
        return _INTEGER.fullmatch(value) is not None
    if pa.types.is_floating(type_):
        try:
            float(value)
        except ValueError:
            return False
        return True
    if pa.types.is_boolean(type_):
        return value.lower() in {"true", "false", "1", "0"}
    return True


# -- Parquet ----------------------------------------------------------------------------


def _parse_parquet(handle: BinaryIO, schema: pa.Schema) -> pa.Table:
    try:
        parquet = pq.ParquetFile(handle)
        present = set(parquet.schema_arrow.names)
        return parquet.read(columns=[name for name in schema.names if name in present])
    except (pa.ArrowException, OSError) as exc:
        raise _Problem(_Finding(f"not a readable Parquet file: {exc}")) from None


_Diagnose = Callable[[BinaryIO, pa.Schema], "_Finding | None"]
_FORMATS: dict[str, tuple[Callable[[BinaryIO, pa.Schema], pa.Table], _Diagnose | None]] = {
    "jsonl": (_parse_jsonl, _diagnose_jsonl),
    "csv": (_parse_csv, _diagnose_csv),
    "parquet": (_parse_parquet, None),
}


def select_declared(table: pa.Table, schema: pa.Schema | None, uri: str) -> pa.Table:
    """A table file's rows as a table source declares them (a pipeline's or Iceberg's):
    the declared columns, required ones present and never null, absent nullable ones as
    nulls, every column nullable in the result (Spark's reading side). SourceDataError
    naming `uri` otherwise."""
    if schema is None:
        return table
    missing = [f.name for f in schema if not f.nullable and f.name not in table.column_names]
    if missing:
        raise SourceDataError(uri, f"required columns {missing} of the source's schema missing")
    columns = []
    for field in schema:
        if field.name not in table.column_names:
            # A table whose schema gained a column keeps its older files as they were:
            # there the column reads as nulls, as a file source's absent column does.
            columns.append(pa.nulls(table.num_rows, field.type))
            continue
        column = table.column(field.name)
        if not field.nullable and column.null_count:
            raise SourceDataError(uri, "a null in a required column", column=field.name)
        columns.append(_cast_declared(column, field, uri))
    return pa.Table.from_arrays(columns, schema=pa.schema([f.with_nullable(True) for f in schema]))


def _cast_declared(column: pa.ChunkedArray, field: pa.Field, uri: str) -> pa.ChunkedArray:
    # Safe casts only: a value that does not fit the declared type (an int64 of 2**40
    # declared int32) is a finding about the file, never a value silently wrapped.
    try:
        return column.cast(field.type, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise SourceDataError(
            uri, f"cannot read as {field.type}: {exc}", column=field.name
        ) from None
