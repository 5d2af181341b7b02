# PYTHON_ARGCOMPLETE_OK (argcomplete's global completion looks for this marker here)
"""The `batchpoint` command: inspect and operate checkpoints outside Airflow."""

from batchpoint.cli.main import main

__all__ = ["main"]
