"""The demo's last word: the published sinks against a plain pandas computation over the
input (exactly once), and the Iceberg table's history, each retained checkpoint's
snapshot against the reference at its barrier; and `reports` against pandas over what
payments published as of the payments checkpoint it read up to."""

from __future__ import annotations

from typing import Any

from batchpoint.settings import Settings
from batchpoint.storage.base import ObjectStore
from demo.payments import BALANCES_TABLE
from demo.say import say, step


class PublishedChecks:
    def __init__(self, settings: Settings, store: ObjectStore) -> None:
        self.settings = settings
        self.store = store

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

    def _published_and_expected(self) -> tuple[Any, Any, Any, Any]:
        from batchpoint.protocol.sinks import read_sink_table
        from demo.payments import SOURCE_ROOT
        from demo.payments_reference import compute_reference

        c = self.coordinator
        head = c.completed.get(c.head.get().checkpoint_id)
        reference = compute_reference(self.store, SOURCE_ROOT, upto=head.pending.barrier["events"])
        # A second engine reads the table: pyiceberg's own scan into pandas, not Spark
        # and not batchpoint's manifest.
        balances = self.balances_table().read().to_pandas()
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
        say(
            f"Iceberg table {BALANCES_TABLE} (read with pyiceberg): {len(balances)} accounts, "
            f"alerts: {len(alerts)} accounts: identical to the reference. Exactly once: no "
            "event lost, none counted twice."
        )
        return self.table_history()

    def table_history(self) -> int:
        """The table's commits, one per checkpoint (and one rewind for the restore), and
        the table as of every retained checkpoint against the reference at its barrier."""
        import pandas as pd

        from demo.payments import SOURCE_ROOT
        from demo.payments_reference import compute_reference

        step(f"the Iceberg table {BALANCES_TABLE}: its commits, and time travel by checkpoint")
        table = self.balances_table()
        commits = table.history()
        for commit in commits:
            say(
                f"snapshot {commit.snapshot_id}: checkpoint {commit.checkpoint_id} "
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
        checked = []
        for cid in sorted(committed & set(timeline)):
            barrier = timeline[cid].pending.barrier["events"]
            expected = compute_reference(self.store, SOURCE_ROOT, upto=barrier).balances
            got = table.read(cid).to_pandas().sort_values("account_id", ignore_index=True)
            try:
                pd.testing.assert_frame_equal(
                    got[list(expected.columns)], expected, check_dtype=False
                )
            except AssertionError as exc:
                say(f"MISMATCH as of checkpoint {cid}: {exc}")
                return 1
            checked.append(f"{cid} ({len(got)} rows)")
        say(
            f"as of checkpoints {', '.join(checked)} (the head's timeline): equal to the "
            "reference at each one's barrier"
        )
        left = sorted(committed - set(timeline))
        if left:
            say(
                f"as of {', '.join(map(str, left))} (left behind by the restore): what they "
                f"published then, e.g. `batchpoint sink show payments balances_table "
                f"--checkpoint {left[-1]}`"
            )
        return 0
