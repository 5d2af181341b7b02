"""Run the chain's concurrency model for many seeded schedules and report every violation.

Pipeline `up` and pipeline `down` (which reads up's snapshot and append sinks) run as
concurrent actors against one store: their DAG runs, plain restores of either, a
cascade restore of up (cut short by crashes, finished by a retry or the quiet hours'
call), GC of both, with storage faults and crash points, interleaved by a seeded step
scheduler; then an independent checker holds the store against the true history
(consumes-once, stops-loudly, cascade-ends, cascade-did; tests/support/chain_model.py).

    .venv/bin/python bench/model_check_chain.py --schedules 1000
    .venv/bin/python bench/model_check_chain.py --schedules 50 --store s3
    .venv/bin/python bench/model_check_chain.py --seed 417 --schedules 1 -v

Prints schedules, steps, faults, cascades and violations (a table, then one JSON line);
exits 1 on any violation.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

import checkout  # noqa: F401  (the checkout's demo/ and devstack/)

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "tests") not in sys.path:
    sys.path.insert(0, str(ROOT / "tests"))

from model_check import local_stores, s3_stores  # noqa: E402
from support.chain_model import run_chain_schedule  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    parser.add_argument("--store", choices=["local", "s3"], default="local")
    parser.add_argument("--no-faults", action="store_true", help="interleavings only")
    parser.add_argument("-v", "--verbose", action="store_true", help="one line per schedule")
    args = parser.parse_args(argv)
    if args.schedules < 1:
        parser.error("--schedules must be >= 1")
    started = time.monotonic()
    steps = faults = cascades = 0
    rules: Counter[str] = Counter()
    failed: list[int] = []
    stores = local_stores() if args.store == "local" else s3_stores()
    with stores as make:
        for seed in range(args.seed, args.seed + args.schedules):
            result = run_chain_schedule(seed, make(seed), faults=not args.no_faults)
            steps, faults = steps + result.steps, faults + result.faults
            cascades += "cascade" in result.actors
            if args.verbose:
                print(f"seed {seed}: {result.steps} steps, {result.faults} faults, "
                      f"actors {','.join(result.actors)}", flush=True)  # fmt: skip
            for v in result.violations:
                rules[v.rule] += 1
                print(f"  VIOLATION {v}", flush=True)
            if result.violations:
                failed.append(seed)
            done = seed - args.seed + 1
            if done % 100 == 0:
                print(f"{done} schedules, {sum(rules.values())} violations", flush=True)
    seconds = time.monotonic() - started
    print()
    print(f"{'store':<22}{args.store}")
    print(
        f"{'schedules':<22}{args.schedules} (seeds {args.seed}..{args.seed + args.schedules - 1})"
    )
    print(f"{'with a cascade':<22}{cascades}")
    print(f"{'steps':<22}{steps}")
    print(f"{'faults injected':<22}{faults}")
    print(f"{'violations':<22}{sum(rules.values())} in {len(failed)} schedule(s)")
    for rule, n in rules.most_common():
        print(f"  {rule:<20}{n}")
    print(f"{'seconds':<22}{seconds:.1f}")
    figures = {
        "bench": "model_check_chain", "store": args.store, "schedules": args.schedules,
        "cascades": cascades, "steps": steps, "faults": faults,
        "violations": dict(rules), "failed_seeds": failed, "seconds": round(seconds, 1),
    }  # fmt: skip
    print(json.dumps(figures))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
