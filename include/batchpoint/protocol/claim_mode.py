"""Who owns a restored checkpoint from the restore on: Flink's RestoreMode, CLAIM or
NO_CLAIM. Every checkpoint of ours is a full snapshot, so the first checkpoint after a
restore shares no file with the restored one either way; what the mode decides is only
whether retention may drop it."""

from __future__ import annotations

import enum

from batchpoint.errors import ConfigError


class ClaimMode(enum.StrEnum):
    #: The pipeline takes ownership: a savepoint or a checkpoint kept forever becomes
    #: subsumable, so retention drops it once newer checkpoints complete, and GC deletes
    #: its files. A savepoint folder is copied in and never deleted.
    CLAIM = "claim"
    #: The default: it stays exactly as retained as it was.
    NO_CLAIM = "no_claim"

    @classmethod
    def of(cls, value: ClaimMode | bool | str | None) -> ClaimMode:
        """The mode a flag or a form field names: a ClaimMode, its value (`claim`,
        `no_claim`), or the boolean of the older `claim` flag (also as template text,
        "True"/"false"); None or empty: NO_CLAIM."""
        if isinstance(value, ClaimMode):
            return value
        if value is None or value is False or value == "":
            return cls.NO_CLAIM
        if value is True:
            return cls.CLAIM
        if isinstance(value, str):
            text = value.strip().lower().replace("-", "_")
            if text in ("true", "false"):
                return cls.CLAIM if text == "true" else cls.NO_CLAIM
            for mode in cls:
                if text == mode.value:
                    return mode
        raise ConfigError(f"claim mode {value!r}: expected claim or no_claim (or true/false)")

    @property
    def claims(self) -> bool:
        return self is ClaimMode.CLAIM
