"""The shape of what a native lane hands the store: a group of plain single sends whose
CommitLog records are already encoded, waiting for their place in the log.

The store never imports the extension that builds such a group (``sparkmq.native``); it calls
these methods only. ``MessageStore.put_lane_group`` is the one user.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from sparkmq.store.consume_queue import ConsumeQueue


class EncodedGroup(Protocol):
    """Encoded records of consecutive single sends, one per request, in arrival order."""

    @property
    def count(self) -> int:
        """Requests (= records) in the group."""

    @property
    def record_bytes(self) -> int:
        """Bytes of all the group's records."""

    @property
    def keys(self) -> list[tuple[str, int]]:
        """The distinct (topic, queue id) of the records, in order of first appearance."""

    @property
    def key_counts(self) -> list[int]:
        """Records per key."""

    def place(self, physical_start: int, store_timestamp: int, bases: list[int]) -> bytes:
        """The records as stored from ``physical_start``: each key's queue offsets count up from
        its base, every record gets ``store_timestamp``."""

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
