"""How the checkpoint DAG's ack sensor waits (BATCHPOINT_ACK_SENSOR_MODE): read by the
settings, rendered by the Airflow adapter (airflow/config.py, airflow/epoch_dag.py)."""

from __future__ import annotations

from enum import StrEnum


class SensorMode(StrEnum):
    """A StrEnum: its value is the variable's text."""

    DEFERRABLE = "deferrable"  # defers to the triggerer between looks (no worker slot held)
    RESCHEDULE = "reschedule"  # gives its worker slot back between looks
    POKE = "poke"  # holds its worker slot and looks every poll interval
