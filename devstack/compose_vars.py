"""Compose's variables: `${VAR}`, `${VAR:-default}`, `${VAR-default}`, `${VAR:?error}`,
`${VAR?error}`, `${VAR:+alt}` and `$VAR` substituted in every value of a compose file,
`$$` for a literal `$`, and the `.env` file they are read from beside the environment."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from batchpoint.errors import ConfigError

_VARIABLE = re.compile(
    r"\$(?:(?P<escaped>\$)"
    r"|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\}"
    r"|(?P<plain>[A-Za-z_][A-Za-z0-9_]*))"
)


def interpolate(text: str, variables: Mapping[str, str], where: str = "") -> str:
    """One value with compose's variable syntax substituted."""

    def substitute(match: re.Match[str]) -> str:
        if match["escaped"]:
            return "$"
        name = match["braced"] or match["plain"]
        value = variables.get(name)
        op, arg = match["op"], match["arg"] or ""
        unset_or_empty = value is None or (value == "" and op is not None and op[0] == ":")
        if op in (":-", "-"):
            return arg if unset_or_empty else str(value)
        if op in (":?", "?"):
            if unset_or_empty:
                raise ConfigError(f"{where}: ${{{name}}} is required: {arg or 'not set'}")
            return str(value)
        if op in (":+", "+"):
            return "" if unset_or_empty else arg
        return "" if value is None else str(value)

    return _VARIABLE.sub(substitute, text)


def interpolate_all(node: Any, variables: Mapping[str, str], where: str) -> Any:
    if isinstance(node, str):
        return interpolate(node, variables, where)
    if isinstance(node, Mapping):
        return {k: interpolate_all(v, variables, f"{where}.{k}") for k, v in node.items()}
    if isinstance(node, list):
        return [interpolate_all(v, variables, where) for v in node]
    return node


def read_dotenv(path: Path) -> dict[str, str]:
    """KEY=VALUE lines of a compose `.env` file (none when there is no file)."""
    if not path.is_file():
        return {}
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out[key.strip().removeprefix("export ").strip()] = value
    return out


__all__ = ["interpolate", "interpolate_all", "read_dotenv"]
