"""The `batchpoint` command: inspect and operate checkpoints outside Airflow."""

from batchpoint.cli.main import main

__all__ = ["main"]
