"""The demo's last word: the published sinks against a plain pandas computation over the
input (exactly once), and the balances table's history, the table as of each retained
checkpoint against the reference at its barrier; and `reports` against pandas over what
payments published as of the payments checkpoint it read up to.

The balances table is read by a second engine, as its users read it: an Iceberg table
with pyiceberg's scan, a Delta table with deltalake's (delta-rs) reader, its commits and
time travel from the Delta log alone. Never Spark, never batchpoint's manifest."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from batchpoint.settings import Settings
from batchpoint.storage.base import ObjectStore
from demo.payments import BALANCES_TABLE
from demo.say import say, step


@dataclass(frozen=True)
class Commit:
    """One batchpoint commit of the balances table."""

    id: int  # Iceberg's snapshot id, the Delta version
    checkpoint_id: int | None
    operation: str
    generation: int
    records: int


class IcebergBalances:
    """The Iceberg table, through pyiceberg (the sink's adapter: its scan, its snapshots)."""

    name = f"Iceberg table {BALANCES_TABLE}"
    reader = "pyiceberg"
    noun = "snapshot"

    def __init__(self, table: Any) -> None:
        self.table = table

    def read(self, checkpoint_id: int | None = None) -> Any:
        return self.table.read(checkpoint_id).to_pandas()

    def commits(self) -> list[Commit]:
        return [
            Commit(c.snapshot_id, c.checkpoint_id, c.operation, c.generation, c.records)
            for c in self.table.history()
        ]


class DeltaBalances:
    """The Delta table as a user opens it with deltalake: its folder's URI and the S3
    endpoint and keys; batchpoint's commits told apart by their commit info."""

    name = f"Delta table {BALANCES_TABLE}"
    reader = "deltalake"
    noun = "version"

    def __init__(self, settings: Settings) -> None:
        from batchpoint.storage.redaction import revealed_options

        self.uri = f"{settings.root}/delta/{BALANCES_TABLE.replace('.', '/')}"
        self.options: dict[str, str] = {}
        if settings.root.startswith("s3://"):
            s3 = revealed_options(settings.store_options)
            options = {
                "AWS_ENDPOINT_URL": s3.get("endpoint_url"),
                "AWS_REGION": s3.get("region"),
                "AWS_ACCESS_KEY_ID": s3.get("access_key_id"),
                "AWS_SECRET_ACCESS_KEY": s3.get("secret_access_key"),
                "AWS_ALLOW_HTTP": "true",  # the demo's SeaweedFS speaks http on loopback
            }
            self.options = {k: str(v) for k, v in options.items() if v}

    def open(self, version: int | None = None) -> Any:
        from deltalake import DeltaTable

        return DeltaTable(self.uri, version=version, storage_options=self.options)

    def read(self, checkpoint_id: int | None = None) -> Any:
        """Now, or as of the newest version whose commit info names the checkpoint."""
        if checkpoint_id is None:
            return self.open().to_pandas()
        versions = [c.id for c in self.commits() if c.checkpoint_id == checkpoint_id]
        return self.open(versions[-1]).to_pandas()

    def commits(self) -> list[Commit]:
        out = []
        for info in reversed(self.open().history()):  # newest first
            if "batchpoint.generation" not in info:
                continue  # another writer's commit
            checkpoint = str(info.get("batchpoint.checkpoint-id", ""))
            out.append(
                Commit(
                    int(info["version"]),
                    int(checkpoint) if checkpoint else None,
                    str(info["batchpoint.operation"]),
                    int(info["batchpoint.generation"]),
                    int(info.get("batchpoint.records", 0)),
                )
            )
        return out


class PublishedChecks:
    def __init__(
        self, settings: Settings, store: ObjectStore, table_format: str = "iceberg"
    ) -> None:
        self.settings = settings
        self.store = store
        self.table_format = table_format

    @property
    def coordinator(self) -> Any:
        from batchpoint.protocol.coordinator import CheckpointCoordinator

        return CheckpointCoordinator(self.store, "payments", self.settings.checkpoint)

    @property
    def reports(self) -> Any:
        from batchpoint.protocol.coordinator import CheckpointCoordinator

        return CheckpointCoordinator(self.store, "reports", self.settings.checkpoint)

    def reports_read(self, checkpoint_id: int) -> int | None:
        """The payments checkpoint a reports checkpoint read its balances up to."""
        from batchpoint.sources.upstream import UpstreamPosition

        outcome = self.reports.get_outcome(checkpoint_id)
        return UpstreamPosition.of(outcome.pending.barrier["balances"]).checkpoint_id

    def reports_check(self) -> int:
        """reports' published bucket totals at its head against the reference: payments'
        balances as published at the checkpoint it read up to, bucketed by pandas."""
        import pandas as pd

        from batchpoint.protocol.sinks import read_sink_table
        from demo.reports import BUCKET_COLUMNS, expected_buckets

        head = self.reports.head.get().checkpoint_id
        read = self.reports_read(head)
        balances = read_sink_table(self.store, "payments", "balances_table", read).to_pandas()
        expected = expected_buckets(balances)
        got = read_sink_table(self.store, "reports", "bucket_totals", head).to_pandas()
        got = got[list(BUCKET_COLUMNS)].sort_values("bucket", ignore_index=True)
        try:
            pd.testing.assert_frame_equal(got, expected, check_dtype=False)
        except AssertionError as exc:
            say(f"reports MISMATCH at checkpoint {head}: {exc}")
            return 1
        say(
            f"reports checkpoint {head}: {len(got)} buckets, {int(got['accounts'].sum())} "
            f"accounts: identical to pandas over payments' balances as of checkpoint {read}"
        )
        return 0

    def published_errors(self) -> tuple[int, int]:
        """Accounts whose published balance differs from the reference at the head."""
        expected, got, _, _ = self._published_and_expected()
        merged = expected.merge(got, on="account_id", how="outer", suffixes=("", "_got"))
        wrong = (merged["balance"] != merged["balance_got"]).sum()
        return int(wrong), len(expected)

    def balances_table(self) -> Any:
        """The Iceberg table of the balances, as a user opens it: pyiceberg, on the
        deployment's catalog."""
        from batchpoint.tables.binding import TableBinding
        from batchpoint.tables.service import sink_table

        binding = TableBinding(BALANCES_TABLE)
        return sink_table(self.settings.store_ref, "payments", "balances_table", binding)

    def balances(self) -> IcebergBalances | DeltaBalances:
        """The balances table, as the second engine of its format reads it."""
        if self.table_format == "delta":
            return DeltaBalances(self.settings)
        return IcebergBalances(self.balances_table())

    @property
    def table_name(self) -> str:
        return (DeltaBalances if self.table_format == "delta" else IcebergBalances).name

    def _published_and_expected(self) -> tuple[Any, Any, Any, Any]:
        from batchpoint.protocol.sinks import read_sink_table
        from demo.payments import SOURCE_ROOT
        from demo.payments_reference import compute_reference

        c = self.coordinator
        head = c.completed.get(c.head.get().checkpoint_id)
        reference = compute_reference(self.store, SOURCE_ROOT, upto=head.pending.barrier["events"])
        # A second engine reads the table: pyiceberg's own scan or deltalake's reader into
        # pandas, not Spark and not batchpoint's manifest.
        balances = self.balances().read()
        alerts = read_sink_table(self.store, "payments", "alerts").to_pandas()
        balances = balances.sort_values("account_id", ignore_index=True)
        alerts = alerts.sort_values("account_id", ignore_index=True)
        return (
            reference.balances,
            balances[list(reference.balances.columns)],
            reference,
            alerts[list(reference.alerts.columns)],
        )

    def exactly_once(self) -> int:
        import pandas as pd

        step("exactly-once check against a pandas computation over all input")
        expected, balances, reference, alerts = self._published_and_expected()
        say(
            f"input: {reference.files} files, {reference.input_records} records, "
            f"{reference.duplicate_records} re-delivered duplicates"
        )
        try:
            pd.testing.assert_frame_equal(balances, expected, check_dtype=False)
            pd.testing.assert_frame_equal(alerts, reference.alerts, check_dtype=False)
        except AssertionError as exc:
            say(f"MISMATCH: {exc}")
            return 1
        table = self.balances()
        say(
            f"{table.name} (read with {table.reader}): {len(balances)} accounts, "
            f"alerts: {len(alerts)} accounts: identical to the reference. Exactly once: no "
            "event lost, none counted twice."
        )
        return self.table_history()

    def table_history(self) -> int:
        """The table's commits, one per checkpoint (and one rewind for the restore), and
        the table as of every retained checkpoint of the head's timeline against the
        reference at its barrier."""
        table = self.balances()
        step(f"the {table.name}: its commits, and time travel by checkpoint")
        commits = table.commits()
        for commit in commits:
            say(
                f"{table.noun} {commit.id}: checkpoint {commit.checkpoint_id} "
                f"({commit.operation}, restore generation {commit.generation}), "
                f"{commit.records} rows"
            )
        c = self.coordinator
        committed = {m.checkpoint_id for m in commits}
        # The head's timeline must equal the reference at each checkpoint's barrier; the
        # checkpoints a restore left behind keep what they published then.
        timeline: dict[int, Any] = {}  # checkpoint id -> its outcome
        cid = c.head.get().checkpoint_id
        while cid is not None and (outcome := c.get_outcome(cid)) is not None:
            timeline[cid] = outcome
            cid = outcome.pending.base_checkpoint_id
        retained = set(c.completed.retained_ids())
        checked = self._as_of(table, {k: timeline[k] for k in committed & set(timeline)}, retained)
        if checked is None:
            return 1
        read, gone = checked
        say(
            f"as of checkpoints {', '.join(read)} (the head's timeline): equal to the "
            "reference at each one's barrier"
        )
        left = []
        for cid in sorted(committed - set(timeline)):
            (left if _readable(table, cid) else gone).append(cid)
        if gone:
            # Iceberg expires the snapshots of the checkpoints GC drops; a Delta log keeps
            # their versions, but GC deleted the copies only they read.
            say(
                f"as of {', '.join(map(str, sorted(gone)))} (dropped by GC): their "
                f"{table.noun}s are still in the table's log, the files only they read are gone"
            )
        if left:
            say(
                f"as of {', '.join(map(str, left))} (left behind by the restore): what they "
                f"published then, e.g. `batchpoint sink show payments balances_table "
                f"--checkpoint {left[-1]}`"
            )
        return 0

    def _as_of(
        self, table: IcebergBalances | DeltaBalances, outcomes: dict[int, Any], retained: set[int]
    ) -> tuple[list[str], list[int]] | None:
        """The table as of each checkpoint (time travel by checkpoint id) against the
        reference at its barrier: what was checked and which checkpoints GC dropped can
        no longer be read, or None (a mismatch, said). A retained one must read."""
        import pandas as pd

        from demo.payments import SOURCE_ROOT
        from demo.payments_reference import compute_reference

        checked: list[str] = []
        gone: list[int] = []
        for cid in sorted(outcomes):
            if cid not in retained and not _readable(table, cid):
                gone.append(cid)
                continue
            got = table.read(cid).sort_values("account_id", ignore_index=True)
            barrier = outcomes[cid].pending.barrier["events"]
            expected = compute_reference(self.store, SOURCE_ROOT, upto=barrier).balances
            try:
                pd.testing.assert_frame_equal(
                    got[list(expected.columns)], expected, check_dtype=False
                )
            except AssertionError as exc:
                say(f"MISMATCH as of checkpoint {cid}: {exc}")
                return None
            checked.append(f"{cid} ({len(got)} rows)")
        return checked, gone


def _readable(table: IcebergBalances | DeltaBalances, checkpoint_id: int) -> bool:
    """Whether the table as of the checkpoint can be read (GC may have deleted its files)."""
    try:
        table.read(checkpoint_id)
    except Exception:
        return False
    return True
