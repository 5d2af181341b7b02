"""The README's links stay inside the repository: the project has no public home to link
to, and a link into a checkout's file must find it. Every Markdown link (inline or by
reference, `<...>` autolinks too) is a relative path to a file or folder of this
repository, and a `#anchor` is a heading of the file it points into."""

from __future__ import annotations

import re
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]
README = PROJECT / "README.md"

# `](target)` may follow link text that spans lines.
INLINE = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)
AUTOLINK = re.compile(r"<([a-z][a-z0-9+.-]*:[^>\s]+)>", re.IGNORECASE)
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
CODE = re.compile(r"`[^`\n]*`")


def prose(text: str) -> str:
    """The text without code blocks and code spans, where `](` is not a link."""
    return CODE.sub("", FENCE.sub("", text))


def targets(text: str) -> list[str]:
    text = prose(text)
    return [m.group(1) for pattern in (INLINE, REFERENCE, AUTOLINK) for m in pattern.finditer(text)]


def slug(heading: str) -> str:
    """The anchor GitHub (and most renderers) give a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    headings = re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", prose(path.read_text()), re.MULTILINE)
    return {slug(h) for h in headings}


def test_the_link_finder_sees_every_kind_of_link():
    text = (
        "see [a\ntext](docs/a.md#b), [c][ref] and <https://example.org/x>\n"
        "[ref]: http://example.org/y\n"
        "`[not](a-link)` and\n```\n[nor](this)\n```\n"
    )
    assert targets(text) == ["docs/a.md#b", "http://example.org/y", "https://example.org/x"]
    assert slug("Where each rule lives") == "where-each-rule-lives"
    assert slug("Install as a provider (pip)") == "install-as-a-provider-pip"


def test_every_readme_link_points_inside_the_repository():
    found = targets(README.read_text())
    assert found, "the README links its design documents"
    for target in found:
        assert not re.match(r"[a-z][a-z0-9+.-]*:", target, re.IGNORECASE), (
            f"{target}: a link out of the repository"
        )
        path, _, anchor = target.partition("#")
        resolved = (README.parent / path).resolve() if path else README
        assert resolved.is_relative_to(PROJECT) and resolved.exists(), f"{target}: no such path"
        if anchor:
            assert anchor in anchors(resolved), f"{target}: no such heading in {path}"
