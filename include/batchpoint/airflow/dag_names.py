"""The DAG ids of a pipeline, on their own so that the UI plugin can name them without
importing the DAG factory."""

from __future__ import annotations


def dag_ids(pipeline: str) -> dict[str, str]:
    return {
        "checkpoint": f"{pipeline}_checkpoint",
        "savepoint": f"{pipeline}_savepoint",
        "restore": f"{pipeline}_restore",
    }
