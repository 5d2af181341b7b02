"""Damage found while deciding: reported and skipped, never a blocker, never silent."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    subject: str  # what was skipped: "checkpoint 7", a record key
    problem: str
    checkpoint_id: int | None = None

    def __str__(self) -> str:
        return f"{self.subject}: {self.problem}"
