"""The `payments` demo: deterministic input (`payments_data`) and the plain-pandas
reference result it must produce (`payments_reference`, imported on its own as it needs
pandas)."""

from __future__ import annotations

from demo.payments_data import (
    ALERT_LIMIT,
    PARTITIONS,
    PAYMENTS_SCHEMA,
    write_epoch_files,
    write_epochs,
)

__all__ = ["ALERT_LIMIT", "PARTITIONS", "PAYMENTS_SCHEMA", "write_epoch_files", "write_epochs"]
