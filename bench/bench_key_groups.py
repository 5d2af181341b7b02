"""Key-group assignment per row: Spark SQL's xxhash64 (state format 2) against the
Python BLAKE2B Arrow UDF it replaced (format 1), over the same rows in one run.

Rows come from ``spark.range`` (a string account key and a bigint, nothing built on the
driver). Each variant selects its key-group column into Spark's ``noop`` sink, so the
whole column is computed and nothing is written; a **baseline** selects the key columns
alone. Per-row cost = (variant - baseline) / rows; each figure is the best of
``--repeat`` runs after one warm-up run of each variant.

    .venv/bin/python bench/bench_key_groups.py                 # 1M rows
    .venv/bin/python bench/bench_key_groups.py --rows 4000000 --repeat 5

Prints a table and one JSON line. Target (issue 11): format 2 at least 20x faster per
row than format 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from batchpoint.spark.key_groups import key_group_column
from batchpoint.state.keygroups import KeyHash

MAX_PARALLELISM = 128
KEYS = ["account_id", "region"]


def _rows(spark: SparkSession, rows: int) -> DataFrame:
    return spark.range(rows, numPartitions=2).select(
        F.format_string("acct-%09d", F.col("id") % (rows // 3 + 1)).alias("account_id"),
        (F.col("id") % 17).alias("region"),
    )


def _timed(run: Callable[[], object]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def _noop(df: DataFrame) -> Callable[[], object]:
    return lambda: df.write.format("noop").mode("overwrite").save()


def measure(spark: SparkSession, rows: int, repeat: int) -> dict[str, float]:
    df = _rows(spark, rows).cache()
    df.count()  # the rows exist before any clock starts
    variants = {
        "baseline": df.select(*KEYS),
        "format 1 (Python BLAKE2B UDF)": df.select(
            key_group_column(KEYS, MAX_PARALLELISM, df.schema, KeyHash.BLAKE2B).alias("kg")
        ),
        "format 2 (Spark xxhash64)": df.select(
            key_group_column(KEYS, MAX_PARALLELISM, df.schema, KeyHash.XXHASH64).alias("kg")
        ),
    }
    best = {}
    for name, variant in variants.items():
        _timed(_noop(variant))  # warm-up: JIT, Python workers
        best[name] = min(_timed(_noop(variant)) for _ in range(repeat))
    df.unpersist()
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows (default: 1,000,000)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs each (default: 3)")
    args = parser.parse_args(argv)
    if args.rows < 1000 or args.repeat < 1:
        parser.error("--rows must be at least 1000 and --repeat at least 1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        print(
            f"key-group assignment of {args.rows:,} rows ({', '.join(KEYS)}), best of {args.repeat}"
        )
        best = measure(spark, args.rows, args.repeat)
    finally:
        spark.stop()
    base = best["baseline"]
    per_row = {name: max(0.0, t - base) / args.rows * 1e9 for name, t in best.items()}
    v1, v2 = "format 1 (Python BLAKE2B UDF)", "format 2 (Spark xxhash64)"
    # The JVM hash can vanish into the baseline's noise: floor it at 1 ns a row.
    ratio = per_row[v1] / max(per_row[v2], 1.0)
    print(f"{'variant':<32} {'seconds':>8} {'ns/row over baseline':>22}")
    for name, seconds in best.items():
        print(f"{name:<32} {seconds:>8.3f} {per_row[name] if name != 'baseline' else 0:>22.1f}")
    print(f"format 1 / format 2 per row: {ratio:.1f}x (target: at least 20x)")
    print(
        json.dumps(
            {
                "bench": "key_groups",
                "rows": args.rows,
                "seconds": {k: round(v, 4) for k, v in best.items()},
                "ns_per_row": {"format1": round(per_row[v1], 1), "format2": round(per_row[v2], 1)},
                "ratio": round(ratio, 1),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
