"""Stand-ins for a Spark Connect server's address, for classifying errors without a
server: a port that accepts connections (all `server_answers` looks for) and one that
nothing listens on."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator


@contextlib.contextmanager
def answering() -> Iterator[str]:
    """The sc:// address of a port that accepts connections while the context lasts."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield f"sc://127.0.0.1:{listener.getsockname()[1]}"


def closed_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def gone() -> str:
    """The sc:// address of a server that is not there."""
    return f"sc://127.0.0.1:{closed_port()}"
