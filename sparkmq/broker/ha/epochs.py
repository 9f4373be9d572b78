"""EpochFileCache: the master terms a broker's CommitLog went through, ``epoch -> start offset``.

A broker that becomes master at epoch E appends ``(E, its max offset)``; a replica copies its
master's entries. Two brokers' logs agree up to the *consistent point*
(``findConsistentPoint``): the newest epoch both hold with the same start offset, up to where the
shorter of the two ends; a returning replica truncates what lies after it. The file
(``epochFileCheckpoint`` in the store root) holds one ``epoch-startOffset`` line per entry and
is replaced atomically.

Example::

    >>> old = [EpochEntry(1, 0)]
    >>> new = [EpochEntry(1, 0, 500), EpochEntry(2, 500)]
    >>> consistent_point(old, 800, new, 900)
    500
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sparkmq.config_file import ConfigFile
from sparkmq.errors import ConfigError
from sparkmq.protocol.controller_bodies import EpochEntry

FILE_NAME = "epochFileCheckpoint"


def with_ends(entries: Sequence[EpochEntry], max_offset: int) -> list[EpochEntry]:
    """Each entry ends where the next starts; the newest at ``max_offset``."""
    out = []
    for i, entry in enumerate(entries):
        end = entries[i + 1].start_offset if i + 1 < len(entries) else max_offset
        out.append(EpochEntry(entry.epoch, entry.start_offset, end))
    return out


def consistent_point(
    ours: Sequence[EpochEntry], our_max: int, theirs: Sequence[EpochEntry], their_max: int
) -> int | None:
    """Where two logs stop agreeing; None when they share no epoch."""
    their_by_epoch = {e.epoch: e for e in with_ends(theirs, their_max)}
    for entry in reversed(with_ends(ours, our_max)):
        other = their_by_epoch.get(entry.epoch)
        if other is not None and other.start_offset == entry.start_offset:
            return min(entry.end_offset, other.end_offset)
    return None


def encode_entries(entries: Sequence[EpochEntry]) -> str:
    return "".join(f"{e.epoch}-{e.start_offset}\n" for e in entries)


def decode_entries(text: str) -> list[EpochEntry]:
    """``epoch-startOffset`` lines; :class:`ConfigError` naming the first line that is not one."""
    entries = []
    for n, line in enumerate(text.splitlines(), 1):
        epoch, sep, start = line.strip().partition("-")
        if not line.strip():
            continue
        if not sep or not epoch.isdigit() or not start.isdigit():
            raise ConfigError(f"line {n} is not epoch-startOffset: {line[:60]!r}")
        entries.append(EpochEntry(int(epoch), int(start)))
    return entries


class EpochFile:
    """The persisted epoch entries of one broker (written tmp → fsync → rename, with a .bak)."""

    def __init__(self, root: Path) -> None:
        self.file: ConfigFile[list[EpochEntry]] = ConfigFile(
            root / FILE_NAME, decode_entries, encode_entries, ConfigError
        )
        self.entries: list[EpochEntry] = []

    def load(self) -> None:
        self.entries = self.file.load() or []

    @property
    def last_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else 0

    def append(self, epoch: int, start_offset: int) -> None:
        """A new term (``EpochFileCache.appendEntry``): epochs and start offsets only grow."""
        if self.entries and (epoch <= self.entries[-1].epoch or start_offset < self.entries[-1].start_offset):
            if epoch == self.entries[-1].epoch and start_offset == self.entries[-1].start_offset:
                return
            raise ValueError(f"epoch {epoch} at {start_offset} does not follow {self.entries[-1]}")
        self._set([*self.entries, EpochEntry(epoch, start_offset)])

    def truncate_after(self, offset: int) -> None:
        """Forget the terms that start after ``offset`` (the log ends there now)."""
        self._set([e for e in self.entries if e.start_offset <= offset])

    def replace(self, entries: Sequence[EpochEntry]) -> None:
        """Take a master's entries (a replica after its truncation to the consistent point)."""
        self._set([EpochEntry(e.epoch, e.start_offset) for e in entries])

    def _set(self, entries: list[EpochEntry]) -> None:
        if entries != self.entries:
            self.file.persist(entries)
            self.entries = entries
