"""The in-memory consumer offset table: (group, topic, queue_id) → next offset to consume.

Mirrors RocketMQ's ``ConsumerOffsetManager.offsetTable``: a commit overwrites the stored
offset (a consumer may rewind, e.g. after an offset reset) and a query for an absent entry
returns :data:`OFFSET_ABSENT` (-1).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from sparkmq.errors import OffsetStoreError

OFFSET_ABSENT = -1
"""What :meth:`ConsumerOffsetTable.query` returns for a queue never committed (RocketMQ: -1)."""

TOPIC_GROUP_SEPARATOR = "@"
"""Joins topic and group in consumerOffset.json keys (RocketMQ's ``TOPIC_GROUP_SEPARATOR``)."""

TopicGroup = tuple[str, str]
"""A ``(topic, group)`` pair: the key of one consumerOffset.json entry."""

OffsetSnapshot = dict[TopicGroup, dict[int, int]]
"""A detached copy of the table: ``{(topic, group): {queue_id: offset}}``."""


def check_name(kind: str, name: str) -> None:
    """Raise :class:`OffsetStoreError` unless ``name`` can be part of a ``topic@group`` key."""
    if not isinstance(name, str) or not name:
        raise OffsetStoreError(f"{kind} must be a non-empty string, got {name!r}")
    if TOPIC_GROUP_SEPARATOR in name:
        raise OffsetStoreError(
            f"{kind} {name!r} contains {TOPIC_GROUP_SEPARATOR!r}, which separates topic and group "
            "in consumerOffset.json keys"
        )


def check_non_negative(kind: str, value: int) -> None:
    """Raise :class:`OffsetStoreError` unless ``value`` is an ``int`` (not a bool) and ≥ 0."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise OffsetStoreError(f"{kind} must be a non-negative int, got {value!r}")


class ConsumerOffsetTable:
    """Thread-safe map of (group, topic, queue_id) to the next offset the group consumes.

    Every method takes one lock, so brokers may commit from request threads while a
    timer persists a :meth:`snapshot`.

    Example::

        >>> table = ConsumerOffsetTable()
        >>> table.commit("CID_TEST", "TopicTest", 0, 5)
        >>> table.query("CID_TEST", "TopicTest", 0)
        5
        >>> table.query("CID_TEST", "TopicTest", 1)
        -1
        >>> table.offsets_of("CID_TEST", "TopicTest")
        {0: 5}
    """

    def __init__(self, snapshot: Mapping[TopicGroup, Mapping[int, int]] | None = None) -> None:
        """Build an empty table, or one holding a copy of ``snapshot``."""
        self._lock = threading.Lock()
        self._offsets: OffsetSnapshot = {}
        self._version = 0
        for (topic, group), queue_offsets in (snapshot or {}).items():
            check_name("topic", topic)
            check_name("group", group)
            for queue_id, offset in queue_offsets.items():
                check_non_negative("queue_id", queue_id)
                check_non_negative("offset", offset)
            self._offsets[(topic, group)] = dict(queue_offsets)

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record ``offset`` as the next offset ``group`` consumes from ``topic`` queue ``queue_id``.

        A lower offset than the stored one is accepted: it is how a reset rewinds a group.
        """
        check_name("group", group)
        check_name("topic", topic)
        check_non_negative("queue_id", queue_id)
        check_non_negative("offset", offset)
        with self._lock:
            queue_offsets = self._offsets.setdefault((topic, group), {})
            if queue_offsets.get(queue_id) != offset:
                queue_offsets[queue_id] = offset
                self._version += 1

    @property
    def version(self) -> int:
        """A counter that moves whenever the table changes: persist only when it moved.

        >>> table = ConsumerOffsetTable()
        >>> before = table.version
        >>> table.commit("g", "t", 0, 5); table.commit("g", "t", 0, 5)
        >>> table.version - before
        1
        """
        with self._lock:
            return self._version

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """Return the committed offset, or :data:`OFFSET_ABSENT` (-1) when there is none."""
        with self._lock:
            return self._offsets.get((topic, group), {}).get(queue_id, OFFSET_ABSENT)

    def offsets_of(self, group: str, topic: str) -> dict[int, int]:
        """Return a copy of ``{queue_id: offset}`` for ``group`` on ``topic`` (empty if none)."""
        with self._lock:
            return dict(self._offsets.get((topic, group), {}))

    def groups_of_topic(self, topic: str) -> set[str]:
        """Return the groups that have committed an offset on ``topic``."""
        with self._lock:
            return {group for (entry_topic, group) in self._offsets if entry_topic == topic}

    def topics_of_group(self, group: str) -> set[str]:
        """Return the topics on which ``group`` has committed an offset."""
        with self._lock:
            return {topic for (topic, entry_group) in self._offsets if entry_group == group}

    def remove_group(self, group: str) -> int:
        """Forget every offset of ``group``; return how many (topic, group) entries went."""
        with self._lock:
            doomed = [key for key in self._offsets if key[1] == group]
            for key in doomed:
                del self._offsets[key]
            self._version += bool(doomed)
            return len(doomed)

    def remove_topic(self, topic: str) -> int:
        """Forget every group's offsets on ``topic``; return how many entries went."""
        with self._lock:
            doomed = [key for key in self._offsets if key[0] == topic]
            for key in doomed:
                del self._offsets[key]
            self._version += bool(doomed)
            return len(doomed)

    def snapshot(self) -> OffsetSnapshot:
        """Return a deep copy of the whole table, safe to serialise without the lock."""
        with self._lock:
            return {key: dict(queue_offsets) for key, queue_offsets in self._offsets.items()}

    def __len__(self) -> int:
        """Return the number of (topic, group) entries."""
        with self._lock:
            return len(self._offsets)

    def __repr__(self) -> str:
        return f"ConsumerOffsetTable({len(self)} topic@group entries)"
