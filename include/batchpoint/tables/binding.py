"""What a table sink declares: the table's identifier and the catalog that serves it.

The binding is also recorded in the sink's spec properties, so the commands that work
from storage alone (`batchpoint sink show`, `gc`) find the table without the code."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from batchpoint.errors import PipelineSpecError

DEFAULT_CATALOG = "batchpoint"
FORMATS = ("iceberg", "delta")  # Delta tables are path-based: see tables/delta_location.py

_PART = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class TableBinding:
    identifier: str  # namespace.table (namespaces may nest: a.b.table)
    catalog: str = DEFAULT_CATALOG
    format: str = "iceberg"

    def __post_init__(self) -> None:
        parts = self.identifier.split(".")
        if len(parts) < 2 or not all(_PART.match(p) for p in parts):
            raise PipelineSpecError(
                f"table '{self.identifier}': name it namespace.table (letters, digits and "
                "underscores, e.g. payments.balances)"
            )
        if not _PART.match(self.catalog):
            raise PipelineSpecError(f"table catalog '{self.catalog}': use letters, digits, _")
        if self.format not in FORMATS:
            raise PipelineSpecError(
                f"table format '{self.format}' is not supported (supported: {', '.join(FORMATS)})"
            )

    @property
    def is_delta(self) -> bool:
        return self.format == "delta"

    @property
    def namespace(self) -> str:
        return self.identifier.rsplit(".", 1)[0]

    def to_properties(self) -> dict[str, str]:
        return {
            "table": self.identifier,
            "table_catalog": self.catalog,
            "table_format": self.format,
        }

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any]) -> TableBinding | None:
        identifier = properties.get("table")
        if not identifier:
            return None
        return cls(
            str(identifier),
            str(properties.get("table_catalog", DEFAULT_CATALOG)),
            str(properties.get("table_format", "iceberg")),
        )

    def __str__(self) -> str:
        if self.is_delta:
            return f"delta table {self.identifier}"
        return f"{self.format} table {self.identifier} (catalog {self.catalog})"
