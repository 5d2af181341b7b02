"""Versioned JSON records: the protocol's names for the record codec (batchpoint.codec).

Every record is one JSON object with a `kind` and a `version`; readers accept only the
versions they know, so a newer writer can never be misread by an older reader. Record
classes are declared with `batchpoint.codec` (`codec.Record`); what is here are the
envelope's functions for the few places that write a body of their own (tests writing
an old record version, for one).
"""

from __future__ import annotations

from batchpoint.codec import Record, decode, encode, from_iso, to_iso

__all__ = ["Record", "decode", "encode", "from_iso", "to_iso"]
