"""What the `batchpoint` command's exit status means, in one place: scripts and CI jobs
branch on it, so each number keeps its meaning across commands and releases."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    #: The command ran and its answer is no: a check or gate failed, a restore, repair or
    #: resume was refused (its report says why).
    FAILED = 1
    #: A mistake in the command or the configuration, or anything batchpoint could not
    #: do: one `error:` line (with --json, one {"error": ...} object) and nothing written.
    ERROR = 2
    #: `batchpoint plan`: the code cannot take the checkpoint's state (the trigger or the
    #: restore would refuse the deploy).
    DEPLOY_REFUSED = 3
    #: Stopped by Ctrl-C (SIGINT), as shells report it: 128 + 2. What a command writes
    #: is written by compare-and-swap, so a stop between two writes loses nothing.
    INTERRUPTED = 130

    @classmethod
    def failed_if(cls, failed: bool) -> ExitCode:
        return cls.FAILED if failed else cls.OK
