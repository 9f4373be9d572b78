"""The shape of what a native lane hands the store: a group of plain single sends whose
CommitLog records are already encoded, waiting for their place in the log.

The store never imports the extension that builds such a group (``sparkmq.native``); it calls
these methods only, with plain values and its own buffers, and keeps every piece of its state
itself. ``MessageStore.put_lane_group(s)`` is the one user (with ``IndexService.put_lane``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import mmap


class EncodedGroup(Protocol):
    """Encoded records of consecutive single sends, one per request, in arrival order."""

    @property
    def count(self) -> int:
        """Requests (= records) in the group."""

    @property
    def record_bytes(self) -> int:
        """Bytes of all the group's records."""

    @property
    def index_count(self) -> int:
        """Index entries of the group (its records' UNIQ_KEY and KEYS)."""

    @property
    def keys(self) -> list[tuple[str, int]]:
        """The distinct (topic, queue id) of the records, in order of first appearance."""

    @property
    def key_counts(self) -> list[int]:
        """Records per key."""

    def place(self, physical_start: int, store_timestamp: int, bases: list[int]) -> bytes:
        """The records as stored from ``physical_start``: each key's queue offsets count up from
        its base, every record gets ``store_timestamp``."""

    def index_into(
        self,
        mapping: mmap.mmap,
        slots: int,
        index_count: int,
        begin_timestamp: int,
        begin_phy_offset: int | None,
        hash_slot_count: int,
        store_timestamp: int,
    ) -> tuple[int, int, int, int] | None:
        """After ``place``: ``index_entries`` written into an index file's mapping as
        ``IndexFile.put_plain`` would (all stored at ``store_timestamp``), then the header as
        ``IndexFile.put`` leaves it (``begin_phy_offset`` None: the first entry's); the new hash
        slot count and index count, the first and last entries' offsets. None, nothing written: no entries."""

    def queue_units(self) -> list[tuple[bytes, int]]:
        """After ``place``: per key its ConsumeQueue units (``encode_units_plain`` of its records'
        physical offsets, sizes and tags codes) and the end (physical offset + size) of its last record."""

    def index_entries(self) -> tuple[list[int], list[int]]:
        """After ``place``: the group's index key hashes and their records' physical offsets, in log order."""
