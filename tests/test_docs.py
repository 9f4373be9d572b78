"""The docs stay a reference: the results page short and free of history, every cited section present,
no dead link, and the guides' tables and lists agree with the code they describe.

docs/benchmarks.md holds the current figure of each measurement (earlier ones live in the repository's
history), so it stays under ``MAX_LINES[...]`` and never tells who ran what when. A citation such as
``docs/benchmarks.md, "Store"`` or ``"The floor" in docs/design-notes.md``, anywhere in the repository
(code comments and docstrings included, wrapped over lines or not), must name a heading of that file.
Every relative link of the README and docs/ reaches a file, and its ``#anchor`` a heading there. The
Spark guide's option table names exactly the options the parsers accept, with their real defaults;
the troubleshooting guide names every exception of sparkmq.errors. (The code samples run in
tests/test_doc_samples.py.)
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

import sparkmq.errors
from sparkmq.broker.acl.accounts import parse_acl_text
from sparkmq.connector.options import SourceOptions
from sparkmq.connector.sink_options import SinkOptions

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCS = REPO_ROOT / "docs"
README = REPO_ROOT / "README.md"
MAX_LINES = {"benchmarks.md": 400, "design-notes.md": 250}
README_MAX_LINES = 150
#: A Markdown inline link's target (the title, if any, after a space is left out).
LINK = re.compile(r"\[[^\]]*\]\(<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\)")
CODE_SPAN = re.compile(r"`[^`\n]*`")
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
    return set(ordered_headings(path))


def ordered_headings(path: Path) -> list[str]:
    """The text of every Markdown heading of ``path`` (outside fenced code), in order."""
    found, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"#{1,6}\s+(.+?)\s*#*\s*$", line)):
            found.append(match.group(1))
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


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = CODE_SPAN.sub(lambda match: match.group(0).strip("`"), heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of ``path``, numbered as GitHub numbers repeated ones."""
    found: set[str] = set()
    for heading in ordered_headings(path):
        anchor, n = github_anchor(heading), 1
        unique = anchor
        while unique in found:
            unique, n = f"{anchor}-{n}", n + 1
        found.add(unique)
    return found


def links(path: Path) -> Iterator[tuple[int, str]]:
    """(line, target) of every inline link outside fenced code and code spans (its text may wrap)."""
    kept, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
            line = ""
        kept.append("" if fenced else CODE_SPAN.sub("", line))
    text = "\n".join(kept)
    for match in LINK.finditer(text):
        yield text.count("\n", 0, match.start()) + 1, match.group(1)


def pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def test_every_relative_link_and_anchor_resolves() -> None:
    dead = []
    for page in pages():
        for number, target in links(page):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...: not ours to check here
                continue
            file_part, _, anchor = target.partition("#")
            resolved = (page.parent / file_part).resolve() if file_part else page
            where = f"{page.relative_to(REPO_ROOT)}:{number}: {target}"
            if not resolved.exists():
                dead.append(f"{where}: no such file")
            elif REPO_ROOT not in resolved.parents and resolved != REPO_ROOT:
                dead.append(f"{where}: outside the repository")
            elif anchor and (resolved.suffix != ".md" or anchor not in anchors(resolved)):
                dead.append(f"{where}: no heading with that anchor")
    assert not dead, "dead links:\n" + "\n".join(dead)


def test_the_link_checker_sees_links_and_anchors(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# A `code` title: yes\n## Again\n## Again\n[x](other.md#y) `[no](link.md)` [a\nb](c.md)\n```\n[z](w)\n```\n"
    )
    assert list(links(page)) == [(4, "other.md#y"), (4, "c.md")]
    assert anchors(page) == {"a-code-title-yes", "again", "again-1"}


def test_the_readme_is_a_short_front_door() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) < README_MAX_LINES, f"README.md has {len(lines)} lines, {README_MAX_LINES} at most"
    guides = {target.partition("#")[0] for _, target in links(README) if target.startswith("docs/")}
    missing = sorted(f"docs/{name}" for name in GUIDES if f"docs/{name}" not in guides)
    assert not missing, f"README.md links no guide {missing}"


GUIDES = (
    "getting-started.md",
    "cluster.md",
    "operations.md",
    "spark.md",
    "clients.md",
    "compatibility.md",
    "troubleshooting.md",
)


def option_table(path: Path) -> list[dict[str, str]]:
    """The rows of the table whose header starts with ``| option |``, by column name (backticks kept)."""
    rows: list[dict[str, str]] = []
    header: list[str] | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]] if line.startswith("|") else []
        if header is None:
            if cells[:1] == ["option"]:
                header = cells
        elif not cells:
            break
        elif not set("".join(cells)) <= set("-: "):
            rows.append(dict(zip(header, cells, strict=True)))
    assert rows, f"{path.relative_to(REPO_ROOT)} has no option table"
    return rows


def single_value(cell: str) -> str | None:
    """The value of a default cell that is one code span, else None (no default, or one per query kind)."""
    match = re.fullmatch(r"`([^`]+)`", cell)
    return match.group(1) if match else None


SOURCE_BASE = {"namesrvAddr": "127.0.0.1:9876", "topic": "orders"}
SINK_BASE = {"namesrvAddr": "127.0.0.1:9876"}


def test_the_spark_option_table_is_the_parsers_own() -> None:
    """Both sides name exactly what the parsers accept, and a documented default parses to what the
    parser gives when the option is left out."""
    rows = option_table(DOCS / "spark.md")
    named = {side: {row["option"].strip("`") for row in rows if row[side] == "✓"} for side in ("source", "sink")}
    assert {name.lower() for name in named["source"]} == SourceOptions.KNOWN
    assert {name.lower() for name in named["sink"]} == SinkOptions.KNOWN
    parsers: dict[str, tuple[Mapping[str, str], object]] = {
        "source": (SOURCE_BASE, SourceOptions.parse),
        "sink": (SINK_BASE, SinkOptions.parse),
    }
    checked = 0
    for row in rows:
        value = single_value(row["default"])
        if value is None:
            continue
        for side, (base, parse) in parsers.items():
            if row[side] == "✓":
                option = row["option"].strip("`")
                assert parse({**base, option: value}) == parse(dict(base)), f"{option}: the default is not {value}"
                checked += 1
    assert checked >= 10
    starting = next(row["default"] for row in rows if row["option"] == "`startingOffsets`")
    stream = {**SOURCE_BASE, "consumerGroup": "CID_orders"}
    assert SourceOptions.parse(stream, streaming=True).starting_offsets == starting.split("`")[1]
    assert SourceOptions.parse(SOURCE_BASE, streaming=False).starting_offsets == starting.split("`")[3]


def test_troubleshooting_names_every_error() -> None:
    text = (DOCS / "troubleshooting.md").read_text(encoding="utf-8")
    errors = [
        name
        for name, value in vars(sparkmq.errors).items()
        if isinstance(value, type) and issubclass(value, sparkmq.errors.SparkmqError)
    ]
    missing = sorted(name for name in errors if f"`{name}`" not in text)
    assert not missing, f"docs/troubleshooting.md does not say what to do about {missing}"


def fenced(path: Path, language: str) -> list[str]:
    """The text of every ```language block of ``path``."""
    blocks, current = [], None
    for line in path.read_text(encoding="utf-8").splitlines():
        if current is None and line.startswith("```" + language):
            current = []
        elif current is not None and line.startswith("```"):
            blocks.append("\n".join(current) + "\n")
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def test_the_cluster_guides_acl_file_is_one_the_broker_reads() -> None:
    (sample,) = fenced(DOCS / "cluster.md", "yaml")
    table = parse_acl_text(sample)
    assert sorted(table.accounts) == ["ops-admin", "orders-app"]
