"""The docs stay a reference: the results page short and free of history, every cited section present.

docs/benchmarks.md holds the current figure of each measurement (earlier ones live in the repository's
history), so it stays under ``MAX_LINES[...]`` and never tells who ran what when. A citation such as
``docs/benchmarks.md, "Store"`` or ``"The floor" in docs/design-notes.md``, anywhere in the repository
(code comments and docstrings included, wrapped over lines or not), must name a heading of that file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCS = REPO_ROOT / "docs"
MAX_LINES = {"benchmarks.md": 400, "design-notes.md": 250}
#: Words that only a lab notebook needs: who ran a measurement, in which sitting, on which line of work.
HISTORY_WORDS = re.compile(r"\b(sessions?|leads?|helpers?|branch(?:es)?)\b", re.IGNORECASE)
TEXT_SUFFIXES = frozenset({".py", ".pyi", ".c", ".h", ".md", ".txt", ".toml", ".cfg", ".ini", ".sh", ".pth"})
SKIPPED_DIRS = frozenset({"build", "dist", "node_modules", "__pycache__"})
#: What may start a continuation line of a wrapped comment or docstring: indentation, ``#``, ``#:``, `` * ``.
LINE_LEAD = re.compile(r"^[ \t]*(?:#:?|\*(?!\*)|//)?[ \t]*")
CITATIONS = (
    re.compile(r'docs/(?P<file>[\w.-]+\.md),\s+"(?P<section>[^"]+)"'),
    re.compile(r'"(?P<section>[^"]+)"\s+in\s+docs/(?P<file>[\w.-]+\.md)'),
)


def headings(path: Path) -> set[str]:
    """The text of every Markdown heading of ``path`` (outside fenced code)."""
    found, fenced = set(), False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"#{1,6}\s+(.+?)\s*#*\s*$", line)):
            found.add(match.group(1))
    return found


def names_heading(section: str, found: set[str]) -> bool:
    """True when ``section`` is a heading, or a heading's name before its parenthesis or colon."""
    return any(heading == section or heading.startswith((f"{section} (", f"{section}:")) for heading in found)


def repository_files() -> Iterator[Path]:
    """The repository's text files, without hidden folders (git, virtualenvs) or build output."""
    for root, folders, files in os.walk(REPO_ROOT):
        folders[:] = [f for f in folders if not (f.startswith(".") or f in SKIPPED_DIRS or f.endswith(".egg-info"))]
        for name in files:
            if Path(name).suffix in TEXT_SUFFIXES:
                yield Path(root, name)


def citations(text: str) -> Iterator[tuple[int, str, str]]:
    """(line, docs file, section) of every citation, comment markers and line breaks read as one space."""
    lines = text.splitlines()
    joined, starts = "", []
    for line in lines:
        starts.append(len(joined))
        joined += LINE_LEAD.sub("", line) + " "
    for pattern in CITATIONS:
        for match in pattern.finditer(joined):
            line_number = sum(1 for start in starts if start <= match.start())
            yield line_number, match.group("file"), " ".join(match.group("section").split())


@pytest.mark.parametrize("name", sorted(MAX_LINES))
def test_a_reference_page_stays_short(name: str) -> None:
    lines = len((DOCS / name).read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES[name], f"docs/{name} has {lines} lines, more than {MAX_LINES[name]}"


@pytest.mark.parametrize("name", sorted(MAX_LINES))
def test_a_reference_page_tells_no_history(name: str) -> None:
    found = [
        f"docs/{name}:{number}: {line.strip()}"
        for number, line in enumerate((DOCS / name).read_text(encoding="utf-8").splitlines(), start=1)
        if HISTORY_WORDS.search(line)
    ]
    assert not found, "history belongs in git, not on the page:\n" + "\n".join(found)


def test_every_cited_docs_section_exists() -> None:
    docs = {path.name: headings(path) for path in DOCS.glob("*.md")}
    broken = []
    for path in repository_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, name, section in citations(text):
            if name not in docs:
                broken.append(f"{path.relative_to(REPO_ROOT)}:{number}: docs/{name} does not exist")
            elif not names_heading(section, docs[name]):
                broken.append(f'{path.relative_to(REPO_ROOT)}:{number}: docs/{name} has no section "{section}"')
    assert not broken, "citations of missing docs sections:\n" + "\n".join(broken)


def test_citations_are_read_across_wrapped_comment_lines() -> None:
    docs = "docs" + "/"  # kept apart, so this file cites nothing itself
    text = f'#: work at once ({docs}design-notes.md, "Chunked\n#: writes"). More.\n * "The\n * floor" in {docs}x.md\n'
    assert sorted(citations(text)) == [(1, "design-notes.md", "Chunked writes"), (3, "x.md", "The floor")]
