"""What the `payments` state must look like, for the quality gate.

* `dedup/seen`: the JSON suite `payments_seen` (event ids present and unique), and a
  sample: the event ids of a few key groups, recomputed from the source up to the
  checkpoint's barrier, are exactly the ones in the state.
* `balances/balances`: the JSON suite `payments_balances` (account ids present and
  unique, counts positive), and a sample: the accounts of a few key groups, recomputed
  from their deduplicated events up to the barrier (the same definitions as
  `payments_reference`), have exactly the balance, event count and last ts in the state.

A suite alone cannot see a balance that is wrong but plausible (an operator that doubles
amounts, or stops deduplicating); the samples do, at the cost of reading the source.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from batchpoint.quality.checks import RecomputeSample
from batchpoint.quality.hook import restore_gate as quality_restore_gate
from batchpoint.quality.suites import PipelineQuality, StateQuality

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

SUITES_DIR = Path(__file__).parent / "suites"

#: Key groups sampled (of 128 by default): a quarter, so that the demo's few dozen
#: accounts give a sample of about ten.
SAMPLE_KEY_GROUPS = 32


def expected_balances(events: DataFrame) -> DataFrame:
    """payments_reference's balances, for whichever accounts `events` holds."""
    from pyspark.sql import functions as F

    return (
        events.dropDuplicates(["event_id"])
        .groupBy("account_id")
        .agg(
            F.sum("amount").alias("balance"),
            F.count(F.lit(1)).alias("event_count"),
            F.max("ts").alias("last_ts"),
        )
    )


def expected_seen(events: DataFrame) -> DataFrame:
    return events.select("event_id").distinct()


def payments_quality(
    *, audit: bool = False, key_groups: int = SAMPLE_KEY_GROUPS
) -> PipelineQuality:
    return PipelineQuality(
        states=(
            StateQuality(
                "dedup",
                "seen",
                suite="payments_seen",
                checks=(
                    RecomputeSample(
                        "seen-recompute", "events", expected_seen, key_groups=key_groups
                    ),
                ),
            ),
            StateQuality(
                "balances",
                "balances",
                suite="payments_balances",
                checks=(
                    RecomputeSample(
                        "balance-recompute",
                        "events",
                        expected_balances,
                        compare=("balance", "event_count", "last_ts"),
                        key_groups=key_groups,
                    ),
                ),
            ),
        ),
        suites_dir=SUITES_DIR,
        audit=audit,
    )


#: The restore DAG's gate hook (BATCHPOINT_QUALITY_GATE=demo.payments_quality:
#: restore_gate): quarantines the checkpoints that fail. `restore_gate_dry` writes nothing.
restore_gate = quality_restore_gate("demo.payments:pipeline")
restore_gate_dry = quality_restore_gate("demo.payments:pipeline", record=False)
