"""The optimizer's facts over Spark Connect (issue 28: nothing to do costs nothing, in
connect mode too): "no rows" read from the optimized plan the server prints (only when
printed in full), "the same rows" from the server's comparison of analyzed plans. The
client runs in a subprocess (this process holds the classic `spark` fixture); each case
is judged on both kinds of session, and the Connect answer must never claim what the
classic one does not."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from support.connect_env import client_env

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]

#: Each case builds its frames from `spark` and the parquet file `path`; the client and
#: this process run the same code.
CASES = r"""
from pyspark.sql import functions as F

def cases(spark, path):
    seen = spark.read.parquet(path)
    # no rows, as the runtime makes them (spark.keyed_io.empty)
    events = spark.createDataFrame([], "event_id string, amount long").limit(0)
    fresh = events.dropDuplicates(["event_id"]).join(seen, "event_id", "left_anti")
    return {
        "empty": ("empty", events),
        "aggregate of empty": ("empty", events.groupBy("event_id").agg(F.sum("amount"))),
        "anti-join of empty": ("empty", fresh),
        "join with empty": ("empty", seen.join(events, "event_id")),
        "a file read": ("empty", seen),
        "rows": ("empty", spark.createDataFrame([("a", 1)], "event_id string, amount long")),
        "union with empty": ("same", seen.unionByName(fresh.select("event_id")), seen),
        "the same object": ("same", seen, seen),
        "another read of the file": ("same", spark.read.parquet(path), seen),
        "a filter": ("same", seen.filter("event_id > 'a'"), seen),
        "a union with rows": ("same", seen.unionByName(seen), seen),
    }

def judge(spark, path):
    from batchpoint.spark.plan_facts import provably_empty, same_rows

    out = {}
    for name, (fact, *frames) in cases(spark, path).items():
        out[name] = provably_empty(*frames) if fact == "empty" else same_rows(*frames)
    return out
"""

CLIENT = (
    CASES
    + r"""
import json, sys
from batchpoint.spark.connect import connect_session
from pyspark.sql import functions as F
from batchpoint.spark.plan_facts import _optimized_text
spark = connect_session(sys.argv[1], "plan-facts")
facts = judge(spark, sys.argv[2])
# 30 columns: Spark prints 25 of a list and says how many more it left out.
columns = [F.col("event_id").alias(f"c{i}") for i in range(30)]
wide = spark.read.parquet(sys.argv[2]).select(*columns)
facts["printed: a narrow plan"] = _optimized_text(spark.read.parquet(sys.argv[2])) is not None
facts["printed: a 30-column plan"] = _optimized_text(wide) is not None
print(json.dumps(facts))
"""
)


def test_connect_facts_hold_where_the_printed_plan_shows_them(
    spark: Any, connect_server: Any, tmp_path: Path
) -> None:
    path = str(tmp_path / "seen.parquet")
    pq.write_table(pa.table({"event_id": ["a", "b"]}), path)
    namespace: dict[str, Any] = {}
    exec(compile(CASES, "cases", "exec"), namespace)
    classic = namespace["judge"](spark, path)

    done = subprocess.run(
        [sys.executable, "-c", CLIENT, connect_server.url, path],
        env=client_env(ROOT / "include"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    connect = json.loads(done.stdout.strip().splitlines()[-1])

    assert connect.pop("printed: a narrow plan") is True
    assert connect.pop("printed: a 30-column plan") is False  # part of it: proves nothing
    proven = {name for name, holds in connect.items() if holds}
    assert proven == {
        "empty",
        "aggregate of empty",
        "anti-join of empty",
        "join with empty",
        "the same object",
        "another read of the file",  # the same analyzed plan: the same files
    }
    # Not over Connect: the analyzed plans differ, where the optimized ones a classic
    # session compares are the same (payments' dedup in an epoch with nothing new).
    assert classic["union with empty"] is True
    # Never a fact the classic optimizer does not prove.
    assert all(classic[name] for name in proven), classic
