"""Dispatch: derive ConsumeQueue units and IndexFile entries from CommitLog records.

The put path hands over what it just appended (``requests_for_put``); recovery and the
start-up catch-up hand over records re-read from the CommitLog (``requests_for_scan``).
Both produce the same ``DispatchRequest`` columns, and both sinks skip what they already
hold, so replaying is idempotent (rule: derived indexes are rebuilt from the CommitLog).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sparkmq.message import layout as L
from sparkmq.message.hashing import java_string_hashes
from sparkmq.message.properties import DELAY_TIME_LEVEL, KEYS, TAGS, UNIQ_KEY, find_property
from sparkmq.store.commitlog import ScannedRecord
from sparkmq.store.index_file import index_hash_values

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
_TAGS = TAGS.encode()
_KEYS = KEYS.encode()
_UNIQ = UNIQ_KEY.encode()
_DELAY = DELAY_TIME_LEVEL.encode()


@dataclass(slots=True)
class DispatchRequest:
    """Consecutive records of one queue (queue offsets ``queue_offset`` onwards), as columns."""

    topic: str
    queue_id: int
    queue_offset: int
    physical_offsets: npt.NDArray[np.int64]
    sizes: npt.NDArray[np.int64]
    tags_codes: npt.NDArray[np.int64]
    store_timestamps: npt.NDArray[np.int64]
    index_hashes: npt.NDArray[np.int64]  # IndexFile key hashes of the records' keys
    index_rows: npt.NDArray[np.int64]  # which record each key hash belongs to


def _property_pattern(key: str) -> re.Pattern[bytes]:
    # A literal "\x02KEY\x01" lets the regex engine jump between candidates quickly.
    return re.compile(rb"\x02" + key.encode() + rb"\x01([^\x02]*)")


_TAGS_RE = _property_pattern(TAGS)
_KEYS_RE = _property_pattern(KEYS)
_UNIQ_RE = _property_pattern(UNIQ_KEY)


def property_column(properties: Sequence[bytes], pattern: re.Pattern[bytes], key: bytes) -> list[bytes | None]:
    """The value of one property for every record (None where absent or empty).

    One regex pass over the whole batch when every record has the property once (the
    common case); otherwise record by record.
    """
    found = pattern.findall(b"\x02" + b"\x02".join(properties))
    if len(found) == len(properties):
        return [value or None for value in found]
    if not found:
        return [None] * len(properties)
    return [find_property(raw, key) or None for raw in properties]


class TagsCoder:
    """tagsCode of records: Java hashCode of TAGS; for delayed messages, the deliver time."""

    def __init__(self, delay_level_millis: Sequence[int]) -> None:
        self._delay_millis = list(delay_level_millis)
        self._cache: dict[bytes, int] = {}

    def codes(self, topic: str, properties: Sequence[bytes], store_timestamps: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        if topic == SCHEDULE_TOPIC:
            return np.array([store_timestamps[i] + self._delay_of(p) for i, p in enumerate(properties)], dtype=np.int64)
        tags = property_column(properties, _TAGS_RE, _TAGS)
        cache = self._cache
        missing = {t for t in tags if t is not None and t not in cache}
        if missing:
            ordered = list(missing)
            hashes = java_string_hashes([t.decode("utf-8", errors="replace") for t in ordered])
            if len(cache) > 100_000:
                cache.clear()
            cache.update(zip(ordered, hashes.tolist()))
        return np.array([0 if t is None else cache[t] for t in tags], dtype=np.int64)

    def _delay_of(self, raw: bytes) -> int:
        level = find_property(raw, _DELAY)
        try:
            index = min(max(int(level or b"0"), 1), len(self._delay_millis)) - 1
        except ValueError:
            index = 0
        return self._delay_millis[index] if self._delay_millis else 0


def index_hashes_of(topic: str, properties: Sequence[bytes]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """IndexFile key hashes of ``topic#UNIQ_KEY`` and ``topic#<each KEYS token>``, with their record rows."""
    values: list[bytes] = []
    rows: list[npt.NDArray[np.int64]] = []
    for column in (property_column(properties, _UNIQ_RE, _UNIQ), property_column(properties, _KEYS_RE, _KEYS)):
        if None not in column and b" " not in b"\x00".join(column):  # type: ignore[arg-type]
            values.extend(column)  # type: ignore[arg-type]
            rows.append(np.arange(len(column), dtype=np.int64))
            continue
        for i, value in enumerate(column):
            for token in value.split(b" ") if value else ():
                if token:
                    values.append(token)
                    rows.append(np.array([i], dtype=np.int64))
    if not values:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return index_hash_values(topic + "#", values), np.concatenate(rows)


def request_for_put(
    coder: TagsCoder, topic: str, queue_id: int, queue_offset: int, properties: Sequence[bytes],
    physical_offsets: npt.NDArray[np.int64], sizes: npt.NDArray[np.int64], store_timestamp: int,
) -> DispatchRequest:
    """The dispatch request of a batch just appended (same topic and queue, consecutive offsets)."""
    timestamps = np.full(len(sizes), store_timestamp, dtype=np.int64)
    hashes, rows = index_hashes_of(topic, properties)
    return DispatchRequest(topic, queue_id, queue_offset, physical_offsets, sizes,
                           coder.codes(topic, properties, timestamps), timestamps, hashes, rows)


def requests_for_scan(coder: TagsCoder, records: Iterable[ScannedRecord], chunk: int = 4096) -> Iterable[DispatchRequest]:
    """Group re-read records into runs of one queue's consecutive offsets, yielded in log order.

    Runs must not be reordered across queues: the index skips records below its end
    physical offset, so a later record of another queue dispatched first would hide these.
    """
    run: list[ScannedRecord] = []
    for record in records:
        kind = L.transaction_type(record.sys_flag)
        if kind not in (L.TRANSACTION_NOT_TYPE, L.TRANSACTION_COMMIT_TYPE):
            continue
        if run and (len(run) >= chunk or run[-1].queue_offset + 1 != record.queue_offset
                    or run[-1].queue_id != record.queue_id or run[-1].topic != record.topic):
            yield _request_of_run(coder, run)
            run = []
        run.append(record)
    if run:
        yield _request_of_run(coder, run)


def _request_of_run(coder: TagsCoder, run: list[ScannedRecord]) -> DispatchRequest:
    first = run[0]
    props = [r.properties_raw for r in run]
    physical = np.fromiter((r.physical_offset for r in run), dtype=np.int64, count=len(run))
    sizes = np.fromiter((r.size for r in run), dtype=np.int64, count=len(run))
    timestamps = np.fromiter((r.store_timestamp for r in run), dtype=np.int64, count=len(run))
    hashes, rows = index_hashes_of(first.topic, props)
    return DispatchRequest(first.topic, first.queue_id, first.queue_offset, physical, sizes,
                           coder.codes(first.topic, props, timestamps), timestamps, hashes, rows)


DispatchListener = Callable[[str, int, int], None]
"""Called after dispatch with (topic, queue_id, new max offset): wakes long-polling pulls."""
