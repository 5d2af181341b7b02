"""How the checkpoint DAG's ack sensor waits (BATCHPOINT_ACK_SENSOR_MODE). On the ground
floor, importing nothing of batchpoint's, so that the settings that read it and the
Airflow adapter that renders it (airflow/config.py, airflow/epoch_dag.py) both import it."""

from __future__ import annotations

from enum import StrEnum


class SensorMode(StrEnum):
    """A StrEnum: its value is the variable's text."""

    DEFERRABLE = "deferrable"  # defers to the triggerer between looks (no worker slot held)
    RESCHEDULE = "reschedule"  # gives its worker slot back between looks
    POKE = "poke"  # holds its worker slot and looks every poll interval
