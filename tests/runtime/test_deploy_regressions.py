"""Deploys that a plan called fine and that left state wrong or the pipeline stuck (issue
36), each reproduced through the public engine (`Pipeline`, `LocalEpochRunner`) on both
stores, with the pandas reference:

- a column tightened to non-null, filled by `migrate=`: every stored row is migrated in
  the migration epoch (a full snapshot), not only the keys that epoch touched;
- what a function sets is checked against the declaration before anything is written: a
  narrower type than declared is cast (a safe widening), a wider one fails the epoch
  naming operator, state, column and both types, a null in a non-null column too, and
  a collated string is stored as the plain string declared;
- an operator given a new uid under its old name, its old uid dropped as the refusal
  advised: plan and trigger agree, the epoch runs;
- on a base that recorded no schema, a nullable column made non-null: refused when its
  stored rows hold a null (migrate= then fills them), kept when none does."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

from batchpoint.ops.local_epoch import LocalEpochRunner
from batchpoint.protocol.checkpoint import CheckpointStatus
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.deploy_plan import Verdict
from batchpoint.runtime.api import OperatorContext, Pipeline, State
from batchpoint.runtime.restore import ClaimMode, restore_checkpoint
from batchpoint.runtime.runner import OperatorFailed
from batchpoint.storage import StoreRef
from support.deploys import EVENTS, SOURCE_ROOT, TOTALS_V1, Deploys, counting, reference

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _same_counts(got: pd.DataFrame, upto: int) -> None:
    pd.testing.assert_frame_equal(
        got[["user", "n", "total"]].reset_index(drop=True),
        reference(range(upto + 1)),
        check_dtype=False,
        check_exact=True,
    )


def _aborted_with(run: Deploys, epoch: int, *needles: str) -> None:
    """Epoch `epoch` fails, its checkpoint aborted as declined, before any file of the
    state is acknowledged; the error (one line) and the decline name every needle."""
    import json

    assert run.runner is not None
    lines = "".join(json.dumps(e) + "\n" for e in _events(epoch))
    run.store_ref.open().put(f"{SOURCE_ROOT}/p0/e{epoch:05d}.jsonl", lines.encode())
    run.clock.advance(1)
    coordinator = run.runner.driver.coordinator
    with pytest.raises(OperatorFailed) as failed:
        run.runner.run_epoch()
    said = str(failed.value)
    assert "\n" not in said and "Traceback" not in said, said
    cid = coordinator.head.get().checkpoint_id + 1
    outcome = coordinator.get_outcome(cid)
    assert outcome is not None and outcome.status is CheckpointStatus.ABORTED, outcome
    assert coordinator.acks(cid) == {}
    for needle in needles:
        assert needle in said and needle in outcome.message, (said, outcome.message)


def _events(epoch: int) -> list[dict[str, Any]]:
    from support.deploys import events_of

    return events_of(epoch)


def test_a_column_tightened_to_non_null_is_migrated_in_every_row(
    spark: Any, table_store: StoreRef
) -> None:
    """Before: the migration epoch wrote a changelog over the unmigrated base, so only the
    keys it touched were migrated (the others read null ever after), and migrate= never
    ran again (the fingerprint ignored nullability)."""
    from pyspark.sql import functions as F

    run = Deploys(spark, table_store)
    tagged = TOTALS_V1.append(pa.field("tag", pa.string()))
    run.deploy(tagged)
    for n in range(3):
        run.epoch(n)
    stored = run.state()
    assert len(stored) == 30 and stored["tag"].isna().all()

    calls: list[int] = []

    def fill(old: Any) -> Any:
        calls.append(1)
        return old.withColumn("tag", F.coalesce(F.col("tag"), F.lit("x")))

    tight = tagged.set(3, pa.field("tag", pa.string(), nullable=False))
    run.deploy(State(tight, migrate=fill), fn=counting(fill))
    assert run.runner is not None
    entry = next(e for e in run.runner.driver.plan().entries if e.kind == "state")
    assert entry.verdict is Verdict.USER_MIGRATION, entry
    run.epoch(3)
    assert calls == [1, 1]  # migrate=, then the function's own fill of new rows
    got = run.state()
    assert len(got) == 30
    assert (got["tag"] == "x").all(), f"{int(got['tag'].isna().sum())} of 30 rows not migrated"
    _same_counts(got, 3)
    run.epoch(4)
    assert calls == [1, 1, 1], "migrate= ran again"
    _same_counts(run.state(), 4)


def test_a_narrower_type_than_declared_is_cast_to_the_declaration(
    spark: Any, table_store: StoreRef
) -> None:
    """The state declares n as bigint and the function sets an int: the files hold the
    declaration, and the next epoch's plan keeps the state unchanged."""
    from pyspark.sql import functions as F

    run = Deploys(spark, table_store)
    wide = TOTALS_V1.set(1, pa.field("n", pa.int64()))
    run.deploy(wide, fn=counting(lambda df: df.withColumn("n", F.col("n").cast("int"))))
    run.epoch(0)
    run.epoch(1)
    assert run.runner is not None
    plan = run.runner.driver.plan()
    assert plan.deployable and plan.unchanged, plan.render()
    coordinator = run.runner.driver.coordinator
    head = coordinator.completed.get(coordinator.head.get().checkpoint_id)
    files = [h for h in head.handles if h.name == "state-totals"]
    schema = _file_schema(run.store_ref, files[0].path)
    assert schema.field("n").type == pa.int64(), schema
    _same_counts(run.state(), 1)


def test_a_collated_string_set_as_state_is_stored_as_the_plain_string_declared(
    spark: Any, table_store: StoreRef
) -> None:
    """The function sets the key under Spark 4's UTF8_LCASE collation, which Arrow cannot
    hold: it is stored as the declared plain string. Before, the next epoch's changelog
    compared the collated frame with the plain one read back and failed
    (INDETERMINATE_COLLATION); a collated key is also placed by its bytes, so comparing
    under the collation split one key between layers."""
    from pyspark.sql import functions as F

    run = Deploys(spark, table_store)
    run.deploy(fn=counting(lambda df: df.withColumn("user", F.collate("user", "UTF8_LCASE"))))
    for epoch in range(3):
        run.epoch(epoch)
    assert run.runner is not None
    assert run.runner.driver.plan().unchanged
    _same_counts(run.state(), 2)


def test_a_wider_type_than_declared_fails_the_epoch_naming_it(
    spark: Any, table_store: StoreRef
) -> None:
    """Before: the epoch completed with bigint files under a recorded int, and every later
    epoch of unchanged code failed as a narrowing."""
    from pyspark.sql import functions as F

    run = Deploys(spark, table_store)
    run.deploy()
    run.epoch(0)
    run.deploy(fn=counting(lambda df: df.withColumn("n", F.col("n").cast("bigint"))))
    _aborted_with(run, 1, "operator 'aggregate'", "state 'totals'", "column 'n'", "bigint", "int")
    assert run.runner is not None
    assert run.runner.driver.coordinator.head.get().checkpoint_id == 1
    run.deploy()  # the function fixed: it goes on from checkpoint 1, exactly once
    run.epoch(2)
    _same_counts(run.state(), 2)


def test_a_null_in_a_non_null_column_fails_the_epoch_naming_it(
    spark: Any, table_store: StoreRef
) -> None:
    from pyspark.sql import functions as F

    run = Deploys(spark, table_store)
    strict = TOTALS_V1.set(2, pa.field("total", pa.int64(), nullable=False))
    run.deploy(strict)
    run.epoch(0)
    nulls = counting(lambda df: df.withColumn("total", F.lit(None).cast("bigint")))
    run.deploy(strict, fn=nulls)
    _aborted_with(run, 1, "operator 'aggregate'", "state 'totals'", "column 'total'", "null")
    run.deploy(strict)
    run.epoch(2)
    _same_counts(run.state(), 2)


def _file_schema(ref: StoreRef, key: str) -> pa.Schema:
    import io

    import pyarrow.parquet as pq

    return pq.read_schema(io.BytesIO(ref.open().get(key).data))


def _clicks(
    store_ref: StoreRef, spark: Any, run: Deploys, *, uid: str | None, max_parallelism: int = 16
) -> Pipeline:
    pipeline = Pipeline("clicks", max_parallelism=max_parallelism)
    pipeline.source("events", root=SOURCE_ROOT, format="jsonl", schema=EVENTS)
    body = counting()

    def aggregate(ctx: OperatorContext) -> Any:
        return body(ctx)

    pipeline.operator(
        "aggregate",
        inputs=["events"],
        key=["user"],
        states={"totals": TOTALS_V1},
        parallelism=2,
        max_parallelism=max_parallelism,
        uid=uid,
    )(aggregate)
    run.runner = LocalEpochRunner(pipeline, store_ref, spark, CheckpointConfig(), clock=run.clock)
    return pipeline


def test_a_new_uid_under_the_old_name_with_the_old_uid_dropped_runs(
    spark: Any, table_store: StoreRef
) -> None:
    """A new max_parallelism is refused with the advice to give the operator a new uid;
    following it (a new uid, the name kept, `drop_operator` of the old uid): before,
    `batchpoint plan` said deployable and every trigger was refused (spec.json was
    matched by name)."""
    run = Deploys(spark, table_store)
    _clicks(table_store, spark, run, uid=None)
    run.epoch(0)
    run.epoch(1)
    _clicks(table_store, spark, run, uid=None, max_parallelism=32)
    assert run.runner is not None
    refused = run.runner.driver.plan()
    assert not refused.deployable and "give the operator a new uid" in refused.problems[0]
    pipeline = _clicks(table_store, spark, run, uid="aggregate2", max_parallelism=32)
    pipeline.drop_operator("aggregate")
    assert run.runner is not None
    plan = run.runner.driver.plan()
    assert plan.deployable, plan.render()
    verdicts = {(e.kind, e.uid): e.verdict for e in plan.entries}
    assert verdicts[("operator", "aggregate2")] is Verdict.NEW
    assert verdicts[("operator", "aggregate")] is Verdict.DROPPED
    for n in (2, 3, 4):
        run.epoch(n)
    # a new state: it started empty at checkpoint 2 and read only epochs 2-4
    from batchpoint.runtime.incremental import base_state_files
    from batchpoint.spark import keyed_io

    coordinator = run.runner.driver.coordinator
    head = coordinator.completed.get(coordinator.head.get().checkpoint_id)
    files = base_state_files(head, "aggregate2", "totals")
    got = keyed_io.read_keyed(spark, table_store, files).toPandas()
    got = got.sort_values("user", ignore_index=True)
    expected = reference([2, 3, 4])
    pd.testing.assert_frame_equal(
        got[["user", "n", "total"]], expected, check_dtype=False, check_exact=True
    )


def test_a_re_key_on_a_base_that_recorded_no_key_is_rewritten_in_full(
    spark: Any, table_store: StoreRef
) -> None:
    """A base whose topology records no key (as an older release's reads) under a code
    that keys the operator otherwise: the plan says its state is rewritten, and the epoch
    writes it in full under the new key. Before, a changelog under the new key was laid
    over files placed by the old one: a key's old row stayed in the key group of the old
    key while its removal went to the new key's group, and the state held both."""
    import json

    run = Deploys(spark, table_store)
    run.deploy()
    for n in range(3):
        run.epoch(n)
    assert run.runner is not None
    coordinator = run.runner.driver.coordinator
    head = coordinator.head.get().checkpoint_id
    assert any(int(h.meta.get("layer", 0)) for h in coordinator.completed.get(head).handles)
    store = run.store_ref.open()
    outcome = json.loads(store.get(coordinator.layout.outcome(head)).data)
    for node in outcome["checkpoint"]["topology"]["nodes"]:
        node.pop("key_columns", None)
    store.put(coordinator.layout.outcome(head), json.dumps(outcome).encode())

    run.deploy(key=("user", "n"))  # each user's count in its key: every epoch moves it
    plan = run.runner.driver.plan()
    assert plan.deployable, plan.render()
    assert [e.uid for e in plan.entries if e.verdict is Verdict.REWRITTEN] == ["aggregate"]
    run.epoch(3)
    layers = {int(h.meta.get("layer", 0)) for h in coordinator.completed.get(head + 1).handles}
    assert layers == {0}, "a changelog under the new key over the old key's files"
    run.epoch(4)  # a changelog under the new key, on files placed by it
    got = run.state()
    assert got["user"].is_unique, f"{len(got) - got['user'].nunique()} duplicate rows"
    _same_counts(got, 4)


def test_a_re_key_on_a_base_of_an_older_release_is_rewritten_in_full(
    make_run: Any, tmp_path: Any
) -> None:
    """A version-1 base records no key: the plan says each stateful operator's state is
    rewritten in full under the code's key, and the epoch does so. Before: the plan said
    kept, and the first epoch wrote a changelog under the new key over files placed by
    the old one (duplicate rows, then wrong published balances)."""
    import dataclasses
    import tarfile
    from pathlib import Path

    fixture = Path(__file__).parent.parent / "data" / "payments-records-v1.tar.gz"
    root = tmp_path / "records-v1"
    with tarfile.open(fixture) as archive:
        archive.extractall(root, filter="data")
    run = make_run(copy_from=root)
    # onto checkpoint 3, a changelog chain of the older release, claimed: a base the
    # next checkpoint may build a changelog on (the head, savepoint 4, is not one)
    restore_checkpoint(run.runner.driver, 3, mode=ClaimMode.CLAIM)
    pipeline = run.runner.driver.pipeline
    dedup, balances = pipeline.operators["dedup"], pipeline.operators["balances"]

    def dedup_with_ts(ctx: OperatorContext) -> Any:
        return dedup.fn(ctx).withColumn("last_ts", F.col("ts"))  # balances' new key

    from pyspark.sql import functions as F

    pipeline.operators["dedup"] = dataclasses.replace(dedup, fn=dedup_with_ts)
    pipeline.operators["balances"] = dataclasses.replace(
        balances, key_columns=("account_id", "last_ts")
    )
    plan = run.runner.driver.plan()
    assert plan.deployable, plan.render()
    rewritten = {e.uid for e in plan.entries if e.verdict is Verdict.REWRITTEN}
    assert rewritten == {"dedup", "balances"}, plan.render()
    for epoch in (4, 5):  # 3's input again, then new
        result = run.epoch(epoch)
        assert result.outcome is not None and result.outcome.completed is not None
        run.assert_matches_reference()
    coordinator = run.runner.driver.coordinator
    first = coordinator.completed.get(coordinator.head.get().checkpoint_id - 1)
    layers = {int(h.meta.get("layer", 0)) for h in first.handles if h.name.startswith("state-")}
    assert layers == {0}, "the first epoch on the older release's base wrote a changelog"


def _forget_recorded_schemas(run: Deploys) -> None:
    """The head's outcome as a release before recorded schemas wrote it: its states'
    schemas are only what their files hold."""
    import json

    assert run.runner is not None
    coordinator = run.runner.driver.coordinator
    key = coordinator.layout.outcome(coordinator.head.get().checkpoint_id)
    store = run.store_ref.open()
    outcome = json.loads(store.get(key).data)
    for node in outcome["checkpoint"]["topology"]["nodes"]:
        for state in node.get("states", ()):
            state.pop("schema", None)
            state.pop("fields", None)
    store.put(key, json.dumps(outcome).encode())


def _state_entry(run: Deploys) -> Any:
    assert run.runner is not None
    plan = run.runner.driver.plan()
    return plan, next(e for e in plan.entries if e.kind == "state")


def test_a_column_tightened_on_a_base_that_recorded_no_schema_is_judged_by_its_rows(
    spark: Any, table_store: StoreRef
) -> None:
    """Seeds 20351, 20483: the files' schema took the declared nullability, so a column
    whose stored rows hold nulls, made non-null without migrate=, planned deployable and
    its epoch failed on the declaration. Now the stored nulls make it a tightening: the
    plan and the trigger refuse it before any Spark job; migrate= then fills the rows."""
    from pyspark.sql import functions as F

    from batchpoint.errors import TriggerRefused

    run = Deploys(spark, table_store)
    tagged = TOTALS_V1.append(pa.field("tag", pa.string()))
    run.deploy(tagged)
    for n in range(3):
        run.epoch(n)
    assert run.state()["tag"].isna().all()
    _forget_recorded_schemas(run)

    tight = tagged.set(3, pa.field("tag", pa.string(), nullable=False))
    run.deploy(tight)
    plan, entry = _state_entry(run)
    assert not plan.deployable and entry.verdict is Verdict.INCOMPATIBLE, plan.render()
    assert "'tag'" in entry.detail and "migrate=" in plan.render(), plan.render()
    assert run.runner is not None
    with pytest.raises(TriggerRefused, match=r"column 'tag' .* stored rows may hold nulls"):
        run.epoch(3)

    def fill(old: Any) -> Any:
        return old.withColumn("tag", F.coalesce(F.col("tag"), F.lit("x")))

    run.deploy(State(tight, migrate=fill), fn=counting(fill))
    plan, entry = _state_entry(run)
    assert entry.verdict is Verdict.USER_MIGRATION, plan.render()
    run.epoch(3)
    got = run.state()
    assert (got["tag"] == "x").all(), f"{int(got['tag'].isna().sum())} of 30 rows not filled"
    _same_counts(got, 3)


def test_a_column_tightened_on_a_base_that_recorded_no_schema_without_nulls_is_kept(
    spark: Any, table_store: StoreRef
) -> None:
    """The other side: files that hold the column as nullable but no null in it (the
    code set it in every row) are read in the declaration, with no refusal."""
    from pyspark.sql import functions as F

    def tag(new: Any) -> Any:
        return new.withColumn("tag", F.lit("t"))

    run = Deploys(spark, table_store)
    tagged = TOTALS_V1.append(pa.field("tag", pa.string()))
    run.deploy(tagged, fn=counting(tag))
    for n in range(3):
        run.epoch(n)
    _forget_recorded_schemas(run)

    run.deploy(tagged.set(3, pa.field("tag", pa.string(), nullable=False)), fn=counting(tag))
    plan, entry = _state_entry(run)
    assert plan.deployable and entry.verdict is Verdict.KEPT, plan.render()
    run.epoch(3)
    got = run.state()
    assert (got["tag"] == "t").all()
    _same_counts(got, 3)
