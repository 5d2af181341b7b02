"""The scripted sequences of the deploy model checker: a seed and its script (kinds of
change and actions, in order; the seed's random steps fill in the rest). Between them
they deploy every kind of change the generator makes and take every step it takes.
The suite runs SUITE (tests/runtime/test_deploy_model.py, a few minutes); `bench/
deploy_check.py --scripted` runs them all."""

from __future__ import annotations

SCRIPTS: dict[str, tuple[int, tuple[str, ...]]] = {
    "renames": (
        3,
        ("rename-op-uid", "rename-state-uid", "restore", "rename-op", "rename-state"),
    ),
    "sink-renames": (4, ("rename-sink", "rename-sink-uid", "savepoint", "import", "dispose")),
    "operators-states-sinks": (
        5,
        ("add-op", "add-state", "add-sink", "drop-state", "drop-sink", "gc", "drop-op", "repair"),
    ),
    "schemas": (
        6,
        ("add-column", "nullable", "widen-narrow", "drop-column", "value-state", "stop"),
    ),
    "placement-and-tables": (
        7,
        ("rekey", "parallelism", "max-parallelism", "sink-mode", "sink-table", "records-newer"),
    ),
    "older-records-and-imports": (
        8,
        # a narrowed n first: the sloppy function sets int64 against int32
        ("records-v1", "rekey", "savepoint", "import-race", "widen-narrow", "sloppy-set-state"),
    ),
}

#: The scripts the suite runs: the cheapest two that between them cover renames with and
#: without uids, restores, placement, sink modes and tables, and a newer release's records.
SUITE = ("renames", "placement-and-tables")
