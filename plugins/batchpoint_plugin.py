"""Adds batchpoint's checkpoint history to the Airflow UI (Browse -> Checkpoints), for a
deployment that mounts the repository instead of installing the package. An installed
batchpoint registers the same plugin through its `airflow.plugins` entry point; then this
file defines nothing (Airflow refuses two plugins of one name)."""

from batchpoint.airflow import plugin

if not plugin.registered_by_entry_point():
    BatchpointPlugin = plugin.BatchpointPlugin
