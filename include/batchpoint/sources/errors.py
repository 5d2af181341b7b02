"""Errors a source raises: bad data in a file, or offsets that no longer fit the files."""

from __future__ import annotations

from batchpoint.errors import BatchpointError


class SourceDataError(BatchpointError):
    """A source file that cannot be read as the declared schema: malformed bytes, a
    missing required column, a null in a required (key) column, a value of the wrong type.

    The message names the file by URI and, where the format allows, the line (text
    formats, 1-based, counting the CSV header) or row (Parquet, 0-based) and column.
    """

    def __init__(
        self,
        uri: str,
        problem: str,
        *,
        line: int | None = None,
        row: int | None = None,
        column: str | None = None,
    ) -> None:
        self.uri = uri
        self.problem = problem
        self.line = line
        self.row = row
        self.column = column
        where = []
        if line is not None:
            where.append(f"line {line}")
        if row is not None:
            where.append(f"row {row}")
        if column is not None:
            where.append(f"column '{column}'")
        located = f" ({', '.join(where)})" if where else ""
        super().__init__(f"bad source file {uri}{located}: {problem}")


class SourceOffsetError(BatchpointError):
    """Recorded offsets that do not fit the files now present in a partition: files were
    deleted, renamed, rewritten or inserted before an offset, or two barriers are out of
    order. Reading on would silently skip or repeat input, so the epoch must stop."""

    def __init__(self, partition: str, problem: str, *, uri: str = "") -> None:
        self.partition = partition
        self.problem = problem
        self.uri = uri
        at = f" at {uri}" if uri else ""
        super().__init__(f"source partition '{partition}'{at}: {problem}")
