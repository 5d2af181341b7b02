"""Python source parsed into a syntax tree, for the tests that read the project's code
(imports, ports, function lengths) rather than run it."""

from __future__ import annotations

import ast
import gc
from pathlib import Path


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse` with the cyclic collector paused for the parse.

    CPython 3.11 keeps the AST converter's recursion depth in the `ast` module's
    global state (python/cpython#106905). A collection that runs while the tree is
    built can finalize an object whose finalizer formats a traceback, and 3.11's
    traceback formatting parses source too, so the outer parse then fails with
    "AST constructor recursion depth mismatch". A test worker holds such objects: py4j
    proxies of a JVM an earlier test stopped log their failed release with a traceback."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(source, filename=filename)
    finally:
        if enabled:
            gc.enable()


def parse_file(path: Path, filename: str | None = None) -> ast.Module:
    return parse(path.read_text(), filename=filename or str(path))
