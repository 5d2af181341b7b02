"""What `batchpoint lineage` answers, as values (ops/lineage.py finds them): which
checkpoints of which pipelines a checkpoint was computed from (upstream), and which were
computed from it (downstream). The CLI renders them as text or JSON, and the UI's
checkpoint page as tables; the words for each row are written here once.

A pipeline source's barrier names the upstream checkpoint an epoch read up to
(sources/upstream.py); the epoch read the upstream's output after its base's read, up to
its own: the range (`read_from`, `read_upto`], None meaning "nothing yet"."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from batchpoint import codec


class ReadState(enum.StrEnum):
    """Whether what a checkpoint read of an upstream is still the upstream's history."""

    KEPT = "kept"  # on the upstream's timeline
    TAKEN_BACK = "taken_back"  # a restore of the upstream took it back
    NOTHING = "nothing"  # the upstream had published nothing when it read
    UNKNOWN = "unknown"  # the upstream's records cannot say (see `problem`)


class Derivation(enum.StrEnum):
    """Whether a downstream checkpoint was computed from the checkpoint asked about."""

    COMPUTED = "computed"  # the checkpoint is on the timeline of what it read
    UNPROVEN = "unproven"  # it read past it, and no recorded timeline can say more
    NOT_COMPUTED = "not_computed"


def read_range(read_from: int | None, read_upto: int | None) -> str:
    """(read_from, read_upto] in words."""
    if read_upto is None:
        return "nothing (none published yet)"
    if read_from == read_upto:
        return f"nothing new (still up to checkpoint {read_upto})"
    if read_from is None:
        return f"from the start up to checkpoint {read_upto}"
    return f"after checkpoint {read_from} up to checkpoint {read_upto}"


@dataclass(frozen=True)
class UpstreamRead(codec.Value):
    """What checkpoint `reader_checkpoint` of pipeline `reader` read of sink `sink` of
    pipeline `pipeline`, through its source `source`. `depth` 1 is a read of the
    checkpoint asked about, 2 a read of a checkpoint it read, and so on."""

    reader: str
    reader_checkpoint: int
    depth: int
    source: str  # the reader's source uid
    pipeline: str  # the upstream pipeline
    sink: str  # its sink's uid
    read_from: int | None  # what the reader's base read (exclusive); None: nothing
    read_upto: int | None  # what the reader read up to (inclusive); None: nothing
    generation: int | None  # the restore generation `read_upto` was admitted in
    state: ReadState
    problem: str = ""  # why it was taken back, or why it cannot be said
    # whether the upstream still retains `read_upto` (None: nothing read); when it does
    # not, what that checkpoint read in turn is not known
    retained: bool | None = None

    def range_text(self) -> str:
        return read_range(self.read_from, self.read_upto)

    def state_text(self) -> str:
        if self.state is ReadState.KEPT:
            held = "" if self.retained else f"; no longer retained by '{self.pipeline}'"
            return f"on the upstream's timeline{held}"
        if self.state is ReadState.TAKEN_BACK:
            return f"taken back by a restore of '{self.pipeline}'"
        if self.state is ReadState.NOTHING:
            return "nothing read"
        return f"not known: {self.problem}"


@dataclass(frozen=True)
class UpstreamLineage(codec.Value):
    """Every upstream read of checkpoint `checkpoint_id` of `pipeline`, depth first:
    each read followed by the reads of the checkpoint it read, while retained."""

    pipeline: str
    checkpoint_id: int
    reads: tuple[UpstreamRead, ...] = ()
    notes: tuple[str, ...] = ()  # what could not be read on the way


@dataclass(frozen=True)
class DownstreamRead(codec.Value):
    """Retained checkpoint `checkpoint_id` of pipeline `pipeline` read sink `sink` of
    pipeline `upstream` up to `read_upto`; `derivation` says whether it was computed
    from the checkpoint asked about, through `via`, the checkpoint of `upstream` it
    was computed from (the one asked about, at depth 1)."""

    pipeline: str
    checkpoint_id: int
    depth: int
    source: str  # its source uid
    upstream: str
    sink: str
    read_from: int | None
    read_upto: int | None
    derivation: Derivation
    via: int | None = None
    why: str = ""

    def range_text(self) -> str:
        return read_range(self.read_from, self.read_upto)

    @property
    def computed(self) -> bool:
        """Computed from it, or possibly (unproven)."""
        return self.derivation is not Derivation.NOT_COMPUTED


@dataclass(frozen=True)
class DownstreamLineage(codec.Value):
    """The retained checkpoints of the other pipelines stored beside `pipeline` that
    read it (directly: depth 1; or a pipeline downstream of it), each with whether it
    was computed from `checkpoint_id`, by pipeline and checkpoint."""

    pipeline: str
    checkpoint_id: int
    completed: bool  # only a completed checkpoint was published, so read by anyone
    reads: tuple[DownstreamRead, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def computed(self) -> tuple[DownstreamRead, ...]:
        return tuple(r for r in self.reads if r.computed)
