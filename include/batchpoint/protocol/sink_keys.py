"""Where a sink's manifest is stored: at its uid's key (invariant 17), whatever the sink
is called; names are labels. A release before issue 36 kept it at the sink's *name*.
uid defaults to the name, so most manifests sit at their uid's key already; a sink
declared with a uid other than its name left its manifest under a name, and so did a
sink renamed with its uid kept (its history cut in two). `SinkRef.legacy` names those
keys, and the first write under the uid adopts what they hold (invariant 16):

1. freeze: a compare-and-swap marks the old manifest `moved_to` the uid. From then on
   nobody changes it: a writer that meets it (GC's prune, a restore's rewind, by key)
   finishes the adoption and writes at the uid's key instead;
2. merge: the frozen manifest is folded into the uid's (`sink_manifest.merged`): created
   from it if absent (a create-once write), else given the epochs it lacks. Every
   adopter merges the same final content, so two at once neither lose nor repeat an
   epoch;
3. remove the old manifest, only once the merge is durable.

A reader reads the uid's manifest, else the old ones (frozen or not, the same content),
else the uid's again (an adoption finished between its reads); it writes nothing. A
manifest that vanished while listed was adopted at a key created before it vanished,
so `each_key` lists again.

Whose is a manifest under a name? The topology of its current epoch's checkpoint says
which sink had that name then: only that uid adopts it, never a sink that merely has
that name now (nor anyone, when the name is some sink's uid: it is that sink's own).
When no record says (the outcome collected), the name decides; `sink_refs` never lists
a sink's uid as another's older name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from batchpoint.errors import CheckpointError, ObjectNotFound, RecordError
from batchpoint.protocol.cas import read_record, update_record
from batchpoint.protocol.checkpoint import CheckpointOutcome
from batchpoint.protocol.layout import PipelineLayout
from batchpoint.protocol.pipeline import OperatorKind
from batchpoint.protocol.sink_manifest import SinkManifest, encode, merged
from batchpoint.protocol.topology import NodeTopology
from batchpoint.storage.base import ObjectStore

_REDIRECTS = 8  # a manifest moves once; this bounds a bug


@dataclass(frozen=True)
class SinkRef:
    """A sink as storage knows it: its `uid` (the key), its `name` (a label), and the
    `legacy` keys where a release before issue 36 may have left its manifest."""

    uid: str
    name: str = ""
    legacy: tuple[str, ...] = ()

    @classmethod
    def of(cls, sink: str | SinkRef) -> SinkRef:
        return sink if isinstance(sink, SinkRef) else cls(sink)

    @property
    def label(self) -> str:
        return self.name or self.uid


def sink_refs(
    declared: Iterable[tuple[str, str]], recorded: Iterable[NodeTopology] = ()
) -> list[SinkRef]:
    """A ref for each declared (uid, name): its legacy keys are its names (this one and
    those checkpoints `recorded` for its uid), less every sink's uid."""
    declared = list(declared)
    sinks = [n for n in recorded if n.kind is OperatorKind.SINK]
    uids = {uid for uid, _ in declared} | {n.uid for n in sinks}
    out = []
    for uid, name in declared:
        names = {name} | {n.name for n in sinks if n.uid == uid}
        out.append(SinkRef(uid, name, tuple(sorted(names - uids))))
    return out


class ManifestKeys:
    """The manifests of one pipeline, read and written by uid (see the module's text)."""

    def __init__(self, store: ObjectStore, layout: PipelineLayout) -> None:
        self._store = store
        self._layout = layout

    def _read(self, key: str) -> SinkManifest | None:
        found = read_record(self._store, self._layout.sink_manifest(key), SinkManifest.decode)
        return found[0] if found else None

    # -- reading ----------------------------------------------------------------------

    def read(self, sink: str | SinkRef) -> SinkManifest | None:
        """The sink's manifest; before its adoption, what its old ones hold."""
        ref = SinkRef.of(sink)
        found = self._read(ref.uid)
        if found is not None or not ref.legacy:
            return found
        adopted = None
        for _, old in sorted(self._olds(ref), key=lambda o: _position(o[1]), reverse=True):
            adopted = merged(adopted, old, ref.uid) or adopted
        return adopted if adopted is not None else self._read(ref.uid)

    def _olds(self, ref: SinkRef) -> list[tuple[str, SinkManifest]]:
        """The old manifests that are `ref`'s, by key: at its legacy keys, and at the
        names it had before each one's oldest epoch (a rename before issue 36 cut its
        history in parts, each under the name it had then: they are one history)."""
        keys, seen, out = list(ref.legacy), {ref.uid}, []
        while keys:
            key = keys.pop(0)
            old = None if key in seen else self._read(key)
            seen.add(key)
            if old is None or (old.moved_to or self._owner(key, old)) not in (None, ref.uid):
                continue
            out.append((key, old))
            for base in {e.base_checkpoint_id for e in old.epochs.values()} - set(old.epochs):
                sinks = self._sinks_of(base)
                keys += [n.name for n in sinks if n.uid == ref.uid]
        return out

    def _owner(self, key: str, manifest: SinkManifest) -> str | None:
        """The uid of the sink whose manifest is at `key`: the sink that had that name
        (or that uid) when its current epoch's checkpoint was triggered. None when no
        record says (no epoch, its outcome collected): then the name decides."""
        current = manifest.current
        sinks = self._sinks_of(max(manifest.epochs, default=None) if current is None else current)
        if any(n.uid == key for n in sinks):
            return key
        return next((n.uid for n in sinks if n.name == key), None)

    def _sinks_of(self, checkpoint_id: int | None) -> list[NodeTopology]:
        """The sinks a completed checkpoint recorded (none when its outcome is gone)."""
        if checkpoint_id is None:
            return []
        key = self._layout.outcome(checkpoint_id)
        try:
            outcome = CheckpointOutcome.decode(key, self._store.get(key).data)
        except ObjectNotFound:
            return []
        nodes = outcome.completed.topology.nodes if outcome.completed is not None else ()
        return [n for n in nodes if n.kind is OperatorKind.SINK]

    # -- writing ----------------------------------------------------------------------

    def update(
        self, sink: str | SinkRef, mutate: Callable[[SinkManifest | None], SinkManifest | None]
    ) -> SinkManifest | None:
        """`cas.update_record` of the sink's manifest: adopted first when only its old
        ones exist; a frozen one met at `sink`'s key (a caller that has only the key)
        is adopted and the write goes to its uid. Returns the manifest as left."""
        ref = SinkRef.of(sink)
        if ref.legacy and not self._store.exists(self._layout.sink_manifest(ref.uid)):
            self._adopt(ref)
        moved: list[str] = []

        def write(current: SinkManifest | None) -> SinkManifest | None:
            moved.clear()
            if current is not None and current.moved_to is not None:
                moved.append(current.moved_to)
                return None
            return mutate(current)

        key = ref.uid
        for _ in range(_REDIRECTS):
            out = update_record(
                self._store, self._layout.sink_manifest(key), SinkManifest.decode, encode, write
            )
            if not moved:
                return out
            self._finish(key, moved[0])
            key = moved[0]
        raise CheckpointError(f"sink manifest '{ref.uid}': moved more than {_REDIRECTS} times")

    def _adopt(self, ref: SinkRef) -> None:
        """Freeze every old manifest that is `ref`'s, then merge them, the newest
        position first (it gives the uid's manifest its current), and remove them."""
        frozen: dict[str, SinkManifest] = {}
        for key, _ in self._olds(ref):

            def freeze(current: SinkManifest | None, key: str = key) -> SinkManifest | None:
                if current is None or current.moved_to is not None:
                    return None
                if self._owner(key, current) not in (None, ref.uid):
                    return None
                return replace(current, moved_to=ref.uid)

            found = update_record(
                self._store, self._layout.sink_manifest(key), SinkManifest.decode, encode, freeze
            )
            if found is not None and found.moved_to == ref.uid:
                frozen[key] = found
        for key in sorted(frozen, key=lambda k: _position(frozen[k]), reverse=True):
            self._finish(key, ref.uid, frozen[key])

    def _finish(self, key: str, uid: str, frozen: SinkManifest | None = None) -> None:
        """Merge the frozen manifest at `key` into `uid`'s, then remove it."""
        frozen = frozen or self._read(key)
        if frozen is None or frozen.moved_to != uid:
            return  # removed already: its adoption is durable
        update_record(
            self._store,
            self._layout.sink_manifest(uid),
            SinkManifest.decode,
            encode,
            lambda current: merged(current, frozen, uid),
        )
        self._store.delete(self._layout.sink_manifest(key))

    # -- every manifest ---------------------------------------------------------------

    def keys(self) -> list[str]:
        prefix = self._layout.root + "sinks/"
        return [p[len(prefix) :].rstrip("/") for p in self._store.list_dirs(prefix)]

    def unreadable(self) -> list[str]:
        """The stored manifests that cannot be read, each with why."""
        damaged = []
        for key in self.keys():
            try:
                self._read(key)
            except RecordError as exc:
                damaged.append(f"{self._layout.sink_manifest(key)} ({exc})")
        return damaged

    def each_key(self, visit: Callable[[str], bool]) -> None:
        """`visit(key)` for every stored manifest; `visit` says whether it was there.
        One that vanished meanwhile was adopted at a key that existed before it
        vanished: the listing is read again for the keys not visited yet."""
        seen: set[str] = set()
        while True:
            fresh = [k for k in self.keys() if k not in seen]
            seen.update(fresh)
            if all([visit(k) for k in fresh]):  # every key visited, none short-cut
                return


def _position(manifest: SinkManifest) -> tuple[int, int]:
    """How far a manifest got: its restore generation, then its current checkpoint."""
    return manifest.generation, manifest.current or 0
