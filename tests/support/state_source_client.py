"""A Spark Connect client of the `batchpoint` format, run as a subprocess (a Connect
session cannot share the pytest process with the classic `spark` fixture):

    python tests/support/state_source_client.py sc://host:port NAME=VALUE...

registers the format with the BATCHPOINT_* settings of its environment, loads it with
the options given and prints one JSON line: {"columns", "rows"} (rows ordered by the
first column, through pandas as the tests' classic reads are) or {"error": ...}.
"""

from __future__ import annotations

import json
import sys


def main(argv: list[str]) -> int:
    from batchpoint.ops.state_source import register
    from batchpoint.spark.session import connect_session

    remote, pairs = argv[0], argv[1:]
    options = dict(pair.split("=", 1) for pair in pairs)
    spark = connect_session(remote, "state-source-client")
    register(spark)
    try:
        df = spark.read.format("batchpoint").options(**options).load()
        frame = df.orderBy(df.columns[0]).toPandas()
    except Exception as exc:  # what a user would see, as one JSON line
        print(json.dumps({"error": str(exc)}))
        return 1
    rows = json.loads(frame.to_json(orient="records", date_format="iso"))
    print(json.dumps({"columns": df.columns, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
