"""A finding: one thing wrong with a checkpoint, named so that an operator can act on it.

Integrity checks, Great Expectations suites and batchpoint's own state checks all
report findings of this one shape, so the gate, the stored report, the task log and
the CLI render them alike. A finding on a state carries the state's uid beside its name
(invariant 17: names are labels); findings stored before uids read with none.
"""

from __future__ import annotations

from dataclasses import dataclass

from batchpoint import codec


class Check:
    """The names of the checks that produce findings (`check` of a Finding). Suites and
    state checks add their own name after a colon: `suite:payments_balances`."""

    METADATA = "metadata"  # the outcome record: parses, known version, COMPLETED, every ack
    FILE = "file"  # a referenced file exists with its recorded size and sha256
    KEY_GROUPS = "key-groups"  # every key group of every state covered exactly once
    SOURCE_OFFSETS = "source-offsets"  # barriers consistent along the base chain
    SINK_MANIFEST = "sink-manifest"  # files a sink published from the checkpoint exist
    READ = "read"  # the state could not be read at all
    ROW_COUNT = "row-count"  # rows counted vs rows recorded in the handles
    SUITE = "suite"  # a Great Expectations suite
    SAMPLE = "sample"  # a recomputation of sampled keys from the source


@dataclass(frozen=True)
class Finding(codec.Value):
    object: str = codec.field(missing="")  # what is wrong: a record key, a file, a partition
    check: str = codec.field(missing="")  # which check found it (see Check)
    problem: str = codec.field()  # what is wrong with it, in words
    # What it concerns, by identity: `operator uid/state uid` for a state (`object` is
    # then its label, the names of the code); None for a record or a file.
    uid: str | None = codec.field(default=None, omit=None)

    def __str__(self) -> str:
        return f"[{self.check}] {self.object}: {self.problem}"


def summarize(findings: list[Finding], limit: int = 3) -> str:
    """The first few findings on one line, for error messages."""
    shown = "; ".join(str(f) for f in findings[:limit])
    more = f" (and {len(findings) - limit} more)" if len(findings) > limit else ""
    return shown + more
