"""Dispatch: derive ConsumeQueue units and IndexFile entries from CommitLog records.

The put path hands over what it just appended (``requests_for_put``); recovery and the
start-up catch-up hand over records re-read from the CommitLog (``requests_for_scan``).
Both produce the same ``DispatchRequest`` columns, and both sinks skip what they already
hold, so replaying is idempotent (rule: derived indexes are rebuilt from the CommitLog).

The columns (tags codes, index key hashes) come from ``dispatch_columns_plain`` (record
by record with ``find_property``: the reference, and the path of small batches) or
``dispatch_columns_bulk`` (numpy over a ``PropertyTable``); tests check that they agree.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import numpy.typing as npt

from sparkmq.message import layout as L
from sparkmq.message.hashing import java_hashes_of_slices, java_utf8_hash
from sparkmq.message.names import SCHEDULE_TOPIC
from sparkmq.message.properties import DELAY_TIME_LEVEL, KEYS, TAGS, UNIQ_KEY, find_property
from sparkmq.message.property_table import PropertyTable
from sparkmq.message.record import SMALL_BATCH_MAX, IntColumn
from sparkmq.store.commitlog import ScannedRecord
from sparkmq.store.index_file import index_hash_value, positive_hashes

_TAGS = TAGS.encode()
_KEYS = KEYS.encode()
_UNIQ = UNIQ_KEY.encode()
_DELAY = DELAY_TIME_LEVEL.encode()
_TAGS_CACHE_MAX = 100_000
VECTOR_HASH_MIN_KEYS = 12  # a group put hashes its index keys with numpy from this many on


@dataclass(slots=True)
class DispatchRequest:
    """Consecutive records of one queue (queue offsets ``queue_offset`` onwards), as columns.

    Columns are numpy arrays, or lists when the batch is small (``SMALL_BATCH_MAX``).
    """

    topic: str
    queue_id: int
    queue_offset: int
    physical_offsets: IntColumn
    sizes: IntColumn
    tags_codes: IntColumn
    store_timestamps: IntColumn
    index_hashes: IntColumn  # IndexFile key hashes of the records' keys
    index_rows: IntColumn  # which record each key hash belongs to


class TagsCoder:
    """tagsCode of records: Java hashCode of TAGS; for delayed messages, the deliver time."""

    def __init__(self, delay_level_millis: Sequence[int]) -> None:
        self._delay_millis = list(delay_level_millis)
        self._cache: dict[bytes, int] = {}

    def code(self, tag: bytes | None) -> int:
        """The tagsCode of one TAGS value (0 when there is none), memoised."""
        if tag is None:
            return 0
        code = self._cache.get(tag)
        if code is None:
            if len(self._cache) >= _TAGS_CACHE_MAX:
                self._cache.clear()
            code = self._cache[tag] = java_utf8_hash(tag)
        return code

    def deliver_times(self, properties: Sequence[bytes], store_timestamps: Sequence[int]) -> list[int]:
        """tagsCodes of SCHEDULE_TOPIC_XXXX records: store time + the delay of their level."""
        return [int(ts) + self._delay_of(raw) for raw, ts in zip(properties, store_timestamps, strict=True)]

    def _delay_of(self, raw: bytes) -> int:
        level = find_property(raw, _DELAY)
        try:
            index = min(max(int(level or b"0"), 1), len(self._delay_millis)) - 1
        except ValueError:
            index = 0
        return self._delay_millis[index] if self._delay_millis else 0


def dispatch_columns_plain(
    coder: TagsCoder, topic: str, properties: Sequence[bytes], store_timestamps: Sequence[int]
) -> tuple[list[int], list[int], list[int]]:
    """(tags code per record, IndexFile key hashes, the record row of each hash), record by
    record with ``find_property``: the reference, and the path of small batches.

    Index keys: every record's ``topic#UNIQ_KEY``, then every record's ``topic#<KEYS
    token>`` (space-separated, empty tokens skipped). The index sorts by physical offset,
    stably, so each record's entries end up as RocketMQ's ``buildIndex`` writes them.
    """
    codes, keys, rows = _tags_codes_and_index_keys(coder, topic, properties, store_timestamps)
    prefix = topic + "#"
    return codes, [index_hash_value(prefix, key) for key in keys], rows


def _tags_codes_and_index_keys(
    coder: TagsCoder, topic: str, properties: Sequence[bytes], store_timestamps: Sequence[int]
) -> tuple[list[int], list[bytes], list[int]]:
    """``dispatch_columns_plain`` before hashing: the index keys (without ``topic#``) and their rows."""
    if topic == SCHEDULE_TOPIC:
        codes = coder.deliver_times(properties, store_timestamps)
    else:
        codes = [coder.code(find_property(raw, _TAGS)) for raw in properties]
    keys: list[bytes] = []
    rows: list[int] = []
    for row, raw in enumerate(properties):
        uniq = find_property(raw, _UNIQ)
        if uniq is not None:
            keys.append(uniq)
            rows.append(row)
    for row, raw in enumerate(properties):
        for token in (find_property(raw, _KEYS) or b"").split(b" "):
            if token:
                keys.append(token)
                rows.append(row)
    return codes, keys, rows


def dispatch_columns_bulk(
    coder: TagsCoder, topic: str, properties: Sequence[bytes], store_timestamps: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """``dispatch_columns_plain`` with numpy: one scan finds UNIQ_KEY, KEYS and TAGS in every
    record, one pass hashes them all straight from the joined properties buffer."""
    table = PropertyTable(properties)
    uniq, keys, tags = table.find((_UNIQ, _KEYS, _TAGS))
    keys = table.split(keys)
    indexed = len(uniq.rows) + len(keys.rows)
    scheduled = topic == SCHEDULE_TOPIC  # tags codes are deliver times, not hashes
    parts = (uniq, keys) if scheduled else (uniq, keys, tags)
    hashes = java_hashes_of_slices(
        table.data,
        np.concatenate([p.starts for p in parts]),
        np.concatenate([p.lengths for p in parts]),
        [(topic + "#", indexed)],
    )
    if scheduled:
        codes = np.array(coder.deliver_times(properties, store_timestamps.tolist()), dtype=np.int64)
    else:
        codes = np.zeros(len(properties), dtype=np.int64)
        codes[tags.rows] = hashes[indexed:]
    return codes, positive_hashes(hashes[:indexed]), np.concatenate((uniq.rows, keys.rows))


def request_for_put(
    coder: TagsCoder,
    topic: str,
    queue_id: int,
    queue_offset: int,
    properties: Sequence[bytes],
    physical_offsets: IntColumn,
    sizes: IntColumn,
    store_timestamp: int,
) -> DispatchRequest:
    """The dispatch request of a batch just appended (same topic and queue, consecutive offsets).

    Up to ``SMALL_BATCH_MAX`` records take ``dispatch_columns_plain`` (lists), more take
    ``dispatch_columns_bulk``.
    """
    if len(properties) <= SMALL_BATCH_MAX:
        timestamps = [store_timestamp] * len(properties)
        codes, hashes, rows = dispatch_columns_plain(coder, topic, properties, timestamps)
        return DispatchRequest(topic, queue_id, queue_offset, physical_offsets, sizes, codes, timestamps, hashes, rows)
    bulk_timestamps = np.full(len(properties), store_timestamp, dtype=np.int64)
    bulk = dispatch_columns_bulk(coder, topic, properties, bulk_timestamps)
    return DispatchRequest(
        topic, queue_id, queue_offset, physical_offsets, sizes, bulk[0], bulk_timestamps, bulk[1], bulk[2]
    )


@dataclass(slots=True)
class GroupDispatch:
    """What a group put (or a slave's replicated run) dispatches: the requests of each queue (no index
    columns), and the index entries of the whole group in log order (one ``IndexService.put``: the index
    skips entries below its end, so per-queue puts of interleaved records would lose some)."""

    queues: list[DispatchRequest]
    index_hashes: list[int]
    index_offsets: list[int]
    index_timestamps: list[int]


# (topic, queue_id, queue_offset, properties, physical_offsets, sizes, store_timestamps) of consecutive records
Appended = tuple[str, int, int, Sequence[bytes], list[int], list[int], list[int]]


def dispatch_for_group(
    coder: TagsCoder,
    appended: Sequence[tuple[str, int, int, Sequence[bytes], list[int], list[int]]],
    store_timestamp: int,
) -> GroupDispatch:
    """The dispatch of small batches just appended together, given in log order as
    ``(topic, queue_id, queue_offset, properties, physical_offsets, sizes)``; the batches of one
    queue hold consecutive queue offsets (the group put assigned them in this order)."""
    return _gathered(coder, [(*batch, [store_timestamp] * len(batch[3])) for batch in appended])


def _gathered(coder: TagsCoder, appended: Iterable[Appended]) -> GroupDispatch:
    """``dispatch_for_group`` of runs given with their store timestamps: a queue's runs that continue
    each other join one request."""
    by_queue: dict[tuple[str, int], list[DispatchRequest]] = {}
    index_keys: list[bytes] = []
    index_prefixes: list[tuple[str, int]] = []  # runs of (topic#, key count) over index_keys
    index_offsets: list[int] = []
    index_timestamps: list[int] = []
    for topic, queue_id, queue_offset, properties, physical, sizes, timestamps in appended:
        codes, keys, rows = _tags_codes_and_index_keys(coder, topic, properties, timestamps)
        if keys:
            index_keys += keys
            index_offsets += [physical[r] for r in rows]
            index_timestamps += [timestamps[r] for r in rows]
            prefix = topic + "#"
            if index_prefixes and index_prefixes[-1][0] == prefix:
                index_prefixes[-1] = (prefix, index_prefixes[-1][1] + len(keys))
            else:
                index_prefixes.append((prefix, len(keys)))
        requests = by_queue.setdefault((topic, queue_id), [])
        last = requests[-1] if requests else None
        if last is None or last.queue_offset + len(last.sizes) != queue_offset:
            requests.append(
                DispatchRequest(topic, queue_id, queue_offset, list(physical), list(sizes), codes, timestamps, [], [])
            )
        else:
            last.physical_offsets += physical
            last.sizes += sizes
            last.tags_codes += codes
            last.store_timestamps += timestamps
    queues = [request for requests in by_queue.values() for request in requests]
    return GroupDispatch(queues, _index_hashes(index_keys, index_prefixes), index_offsets, index_timestamps)


def _index_hashes(keys: list[bytes], prefixes: list[tuple[str, int]]) -> list[int]:
    """IndexFile hashes of ``prefix + key``: one by one for a few keys, else in one numpy pass
    (``java_hashes_of_slices``, the same values), which is cheaper from about a dozen keys on."""
    if len(keys) < VECTOR_HASH_MIN_KEYS:
        hashes: list[int] = []
        first = 0
        for prefix, count in prefixes:
            hashes += [index_hash_value(prefix, key) for key in keys[first : first + count]]
            first += count
        return hashes
    lengths = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
    data = np.frombuffer(b"".join(keys), dtype=np.uint8)
    hashed = positive_hashes(java_hashes_of_slices(data, np.cumsum(lengths) - lengths, lengths, prefixes))
    return cast(list[int], hashed.tolist())


def requests_for_scan(
    coder: TagsCoder, records: Iterable[ScannedRecord], chunk: int = 4096
) -> Iterable[DispatchRequest]:
    """Group re-read records into runs of one queue's consecutive offsets, yielded in log order.

    Runs must not be reordered across queues: the index skips records below its end
    physical offset, so a later record of another queue dispatched first would hide these.
    """
    for run in _runs(records, chunk):
        yield _request_of_run(coder, run)


def requests_for_replica(
    coder: TagsCoder, records: Iterable[ScannedRecord]
) -> Iterator[DispatchRequest | GroupDispatch]:
    """``requests_for_scan`` for a slave's replicated records, in log order: a run of more than
    ``SMALL_BATCH_MAX`` records is a request of its own (numpy columns); the small runs between such
    are gathered into one ``GroupDispatch`` (a request per queue, one index put), as a group put is:
    single sends from many producers interleave queues record by record."""
    small: list[Appended] = []
    for run in _runs(records, 4096):
        if len(run) > SMALL_BATCH_MAX:
            if small:
                yield _gathered(coder, small)
                small = []
            yield _request_of_run(coder, run)
            continue
        first = run[0]
        small.append(
            (
                first.topic,
                first.queue_id,
                first.queue_offset,
                [r.properties_raw for r in run],
                [r.physical_offset for r in run],
                [r.size for r in run],
                [r.store_timestamp for r in run],
            )
        )
    if small:
        yield _gathered(coder, small)


def _runs(records: Iterable[ScannedRecord], chunk: int) -> Iterator[list[ScannedRecord]]:
    """The dispatched records (no half or rolled-back transaction message) in runs of one queue's
    consecutive offsets, at most ``chunk`` long, in log order."""
    run: list[ScannedRecord] = []
    for record in records:
        kind = L.transaction_type(record.sys_flag)
        if kind not in (L.TRANSACTION_NOT_TYPE, L.TRANSACTION_COMMIT_TYPE):
            continue
        if run and (
            len(run) >= chunk
            or run[-1].queue_offset + 1 != record.queue_offset
            or run[-1].queue_id != record.queue_id
            or run[-1].topic != record.topic
        ):
            yield run
            run = []
        run.append(record)
    if run:
        yield run


def _request_of_run(coder: TagsCoder, run: list[ScannedRecord]) -> DispatchRequest:
    first = run[0]
    props = [r.properties_raw for r in run]
    physical = [r.physical_offset for r in run]
    sizes = [r.size for r in run]
    timestamps = [r.store_timestamp for r in run]
    if len(run) <= SMALL_BATCH_MAX:
        codes, hashes, rows = dispatch_columns_plain(coder, first.topic, props, timestamps)
        return DispatchRequest(
            first.topic, first.queue_id, first.queue_offset, physical, sizes, codes, timestamps, hashes, rows
        )
    bulk_timestamps = np.array(timestamps, dtype=np.int64)
    bulk = dispatch_columns_bulk(coder, first.topic, props, bulk_timestamps)
    return DispatchRequest(
        first.topic,
        first.queue_id,
        first.queue_offset,
        np.array(physical, dtype=np.int64),
        np.array(sizes, dtype=np.int64),
        bulk[0],
        bulk_timestamps,
        bulk[1],
        bulk[2],
    )


DispatchListener = Callable[[str, int, int], None]
"""Called after dispatch with (topic, queue_id, new max offset): wakes long-polling pulls."""

GroupDispatchListener = Callable[[Sequence[tuple[str, int]], Mapping[tuple[str, int], int]], None]
"""Called once per put with the (topic, queue id) keys it dispatched to and a mapping from each
of them to its new max offset (read it during the call only): one call however many queues."""
