"""Source barriers: how far an epoch reads in every partition, with proof of what it covered.

An offset is a position in a partition's name-ordered file list (the issue's contract).
Positions stay meaningful only while the files before them stay put, so every offset also
records the name of the last file it covers and a digest of the (name, size) of all the
files it covers. `verify_offset` compares both against a fresh listing: a file deleted,
renamed, inserted before the offset or rewritten to another size changes them, and the
epoch refuses to run instead of silently skipping or re-reading input. The name alone
would miss a deletion paired with an insertion before it; the digest catches every such
change for the price of one hash over names the source lists anyway. A rewrite in place
to the same size is not seen: the listing carries no content fingerprint (an S3 listing
has ETags, a folder would need each file read), and sources are append-only by contract.

JSON form (what a trigger record stores)::

    {"p0": {"offset": 3, "last": "e00002-f001.jsonl", "digest": "sha256:..."}, ...}

A bare integer is accepted as an *unverified* offset (no name, no digest), for callers
that only know a count; it still bounds the read but cannot detect shifted positions.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from batchpoint import codec
from batchpoint.errors import ConfigError, RecordError
from batchpoint.sources.errors import SourceOffsetError


@dataclass(frozen=True)
class FileEntry:
    """One file of a partition as listed now: name relative to the partition, size."""

    name: str
    size: int


def prefix_digest(files: Sequence[FileEntry]) -> str:
    digest = hashlib.sha256()
    for entry in files:
        # NUL cannot occur in an object key, so the encoding is unambiguous. A local
        # folder may hold a name that is not UTF-8 (Python lists it with surrogate
        # escapes): surrogateescape gives back its bytes, and leaves UTF-8 names' as before.
        digest.update(f"{entry.name}\0{entry.size}\n".encode("utf-8", "surrogateescape"))
    return f"sha256:{digest.hexdigest()}"


@dataclass(frozen=True)
class PartitionOffset(codec.Value):
    """The first `offset` files of a partition (in name order) are covered. A bare
    integer in JSON is an unverified offset (`SHORT_FORM`)."""

    SHORT_FORM = "offset"

    offset: int
    last: str | None = None
    digest: str | None = None
    # a pipeline source's: the restore generation the upstream checkpoint it reads up
    # to was admitted in (sources/upstream.py)
    generation: int | None = codec.field(default=None, omit=None)

    def __post_init__(self) -> None:
        if isinstance(self.offset, bool) or not isinstance(self.offset, int) or self.offset < 0:
            raise ConfigError(f"a source offset must be an integer >= 0, got {self.offset!r}")
        if self.offset == 0 and self.last is not None:
            raise ConfigError(f"a source offset of 0 covers no file, yet names '{self.last}'")

    @classmethod
    def capture(cls, files: Sequence[FileEntry]) -> PartitionOffset:
        return cls(len(files), files[-1].name if files else None, prefix_digest(files))

    @property
    def verified(self) -> bool:
        return self.digest is not None

    @classmethod
    def coerce(cls, value: object) -> PartitionOffset:
        """An offset as a caller gives it: a PartitionOffset, a count, or its JSON."""
        if isinstance(value, PartitionOffset):
            return value
        try:
            return cls.from_json(value, "source offset")
        except RecordError:
            raise ConfigError(
                "a source offset must be an integer or {'offset', 'last', 'digest'}, "
                f"got {value!r}"
            ) from None


class SourceBarrier(codec.Value, Mapping[str, PartitionOffset]):
    """Partition -> offset. A partition it does not name is at offset 0."""

    FORM = Mapping[str, PartitionOffset]

    def __init__(self, offsets: Mapping[str, object] | None = None) -> None:
        if offsets is not None and not isinstance(offsets, Mapping):
            raise ConfigError(f"a source barrier must be a JSON object, got {offsets!r}")
        self._offsets = {
            str(partition): PartitionOffset.coerce(value)
            for partition, value in sorted((offsets or {}).items())
        }

    @classmethod
    def coerce(cls, value: SourceBarrier | Mapping[str, object] | None) -> SourceBarrier:
        return value if isinstance(value, SourceBarrier) else cls(value)

    def offset(self, partition: str) -> int:
        found = self._offsets.get(partition)
        return found.offset if found else 0

    def counts(self) -> dict[str, int]:
        return {partition: off.offset for partition, off in self._offsets.items()}

    def total(self) -> int:
        return sum(off.offset for off in self._offsets.values())

    def __getitem__(self, partition: str) -> PartitionOffset:
        return self._offsets[partition]

    def __iter__(self) -> Iterator[str]:
        return iter(self._offsets)

    def __len__(self) -> int:
        return len(self._offsets)

    def __repr__(self) -> str:
        return f"SourceBarrier({self.counts()!r})"


def verify_offset(
    partition: str, recorded: PartitionOffset, files: Sequence[FileEntry], *, uri: str = ""
) -> None:
    """Raise SourceOffsetError unless the first `recorded.offset` of `files` (the listing
    now) are exactly the files the offset covered when it was captured."""
    n = recorded.offset
    if n > len(files):
        was = f" (up to '{recorded.last}')" if recorded.last else ""
        raise SourceOffsetError(
            partition,
            f"an offset covers {n} files{was} but only {len(files)} are present now: "
            "files were deleted after they were recorded (the source is append-only)",
            uri=uri,
        )
    if n == 0 or not recorded.verified:
        return
    names = [entry.name for entry in files]
    if names[n - 1] != recorded.last:
        raise SourceOffsetError(partition, _shift_problem(recorded, names), uri=uri)
    if prefix_digest(files[:n]) != recorded.digest:
        raise SourceOffsetError(
            partition,
            f"the {n} files up to '{recorded.last}' are not the ones recorded: a file before "
            "it was deleted, renamed, rewritten (its size changed) or replaced by another "
            "(the source is append-only and new files must sort after existing ones)",
            uri=uri,
        )


def _shift_problem(recorded: PartitionOffset, names: list[str]) -> str:
    n, last = recorded.offset, recorded.last
    now = names[n - 1]
    if last not in names:
        return (
            f"file '{last}' (position {n}, the last one an offset covers) was deleted or "
            f"renamed; position {n} is now '{now}' (the source is append-only)"
        )
    moved_to = names.index(last) + 1
    if moved_to > n:
        return (
            f"{moved_to - n} file(s) sorting before '{last}' appeared after the offset was "
            f"recorded, shifting it from position {n} to {moved_to}: new files must be named "
            "so that they sort after existing ones (rename the late ones so that they sort "
            "last, and the next epoch reads them)"
        )
    return (
        f"{n - moved_to} file(s) sorting before '{last}' were deleted after the offset was "
        f"recorded, shifting it from position {n} to {moved_to} (the source is append-only)"
    )
