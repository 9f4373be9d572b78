"""The shape of what a native lane hands the store: a group of plain single sends whose
CommitLog records are already encoded, waiting for their place in the log.

The store never imports the extension that builds such a group (``sparkmq.native``); it calls
these methods only. ``MessageStore.put_lane_group`` is the one user (with ``IndexService.put_lane``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import mmap

    from sparkmq.store.consume_queue import ConsumeQueue
    from sparkmq.store.native_bases import SegmentBase


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

    def write_into(self, segment: SegmentBase, store_timestamp: int, bases: list[int]) -> int | None:
        """``place`` at ``segment``'s write position and the records copied in as ``segment.append``
        would; the physical start, or None with nothing done when the segment is not the C type,
        mapped, with room (the caller places and appends)."""

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

    def reserve(
        self, queued: dict[tuple[str, int], int], queues: dict[tuple[str, int], ConsumeQueue]
    ) -> tuple[list[int], list[ConsumeQueue], list[int]] | None:
        """Per key its base queue offset (``queued.get(key, 0)``), its ConsumeQueue
        (``queues[key]``) and that queue's ``max_physical_offset``; ``queued[key]`` moves on by the
        key's count. None, with nothing changed, when a key has no ConsumeQueue yet."""

    def append_units(self, bases: list[int], targets: list[ConsumeQueue]) -> None:
        """After ``place``: ``targets[k].append_units(bases[k], *queue_units()[k])`` for every key k."""

    def index_entries(self) -> tuple[list[int], list[int]]:
        """After ``place``: the group's index key hashes and their records' physical offsets, in log order."""
