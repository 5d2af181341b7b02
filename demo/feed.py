"""Payment files for the deployment's pipeline (the demo's `payments`), written into the
store the environment names (BATCHPOINT_ROOT, BATCHPOINT_S3_*), where its source reads:

    python -m demo.feed 0 1 2          epochs 0, 1 and 2's files (each epoch once, in order)

Run it where the deployment's settings are: `docker compose exec airflow-scheduler python
-m demo.feed 0`, or `./dev stack exec airflow-scheduler python -m demo.feed 0`. The sizes
are the stack test's (tests/support/stack_run.PaymentsFeed): every epoch of one dataset
must be written with the same ones, as an epoch re-delivers records of the one before.
"""

from __future__ import annotations

import argparse
import sys

from batchpoint.errors import BatchpointError
from batchpoint.settings import Settings
from demo.payments import SOURCE_ROOT
from demo.payments_data import write_epoch_files

ACCOUNTS = 40
EVENTS_PER_EPOCH = 300


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m demo.feed", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("epochs", nargs="+", type=int, help="the epochs to write, in order")
    args = parser.parse_args(argv)
    try:
        settings = Settings.from_env()
        store = settings.store_ref.open()
        for epoch in args.epochs:
            files = write_epoch_files(
                store,
                SOURCE_ROOT,
                epoch,
                accounts=ACCOUNTS,
                events_per_epoch=EVENTS_PER_EPOCH,
                files_per_partition=1,
            )
            print(f"epoch {epoch}: {len(files)} files under {settings.root}/{SOURCE_ROOT}/")
    except BatchpointError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
