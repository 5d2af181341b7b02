"""The checkout's root on sys.path and on PYTHONPATH, for the benches: they import the
repository's demo/ and devstack/, which are not part of the installed batchpoint, and so
do the processes they start (Spark workers, spark-submit jobs, Airflow's tasks), as under
./dev and the tests.

A sibling of the scripts (their folder is on sys.path), imported for its effect before
anything of demo/ or devstack/: `import checkout  # noqa: F401`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[1])

if ROOT not in sys.path:
    sys.path.append(ROOT)
_path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
if ROOT not in _path:
    os.environ["PYTHONPATH"] = os.pathsep.join([*_path, ROOT])
