"""The Spark data source ``sparkmq``: stream and batch readers over sparkmq (RocketMQ) queues.

For example::

    sparkmq.register(spark)      # or nothing: pyspark_sparkmq.DefaultSource auto-registers
    (spark.readStream.format("sparkmq").option("namesrvAddr", "127.0.0.1:9876")
         .option("topic", "orders").option("consumerGroup", "orders-to-delta").load())

Offsets are ``{topic: {"broker:queueId": offset}}`` with sorted keys. Each micro-batch reads
exactly [start, end) per queue; ``read()`` pulls those ranges and yields Arrow RecordBatches
built in bulk. After each finished batch the group's offsets on the broker are moved to the
batch end (from ``latestOffset``, because Spark's ``commit`` comes one batch late and never
for the last batch), so lag shows on the broker; the checkpoint stays the source of truth.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, Filter, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from sparkmq.client import MessageQueue
from sparkmq.connector.offsets import QueueOffsets, from_json_offsets, rate_limit, to_json_offsets
from sparkmq.connector.options import SourceOptions
from sparkmq.errors import DataLossError, OptionError

if TYPE_CHECKING:  # numpy and pyarrow only where records are read: the driver's processes never need them
    import pyarrow as pa

    from sparkmq.client.security import ClientSecurity
    from sparkmq.client.selector import MessageSelector
    from sparkmq.connector.driver_view import DriverView

logger = logging.getLogger(__name__)
BATCH_READER_GROUP = "sparkmq-spark-batch-reader"  # names the reads of batch queries on the broker


@dataclass(frozen=True)
class QueueRange(InputPartition):
    """Queue offsets [start, end) of one queue; ``addresses``: where the driver's route had its
    broker when planning (master first, then slaves), so a task reads without asking a NameServer;
    ``table``: the topic's table, when these offsets are read from it (``history=table``)."""

    topic: str
    broker_name: str
    queue_id: int
    start: int
    end: int
    addresses: tuple[str, ...] = ()
    table: str | None = None

    @property
    def queue(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker_name, self.queue_id)

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class QueueRanges(InputPartition):
    """One task's work: one or more queue ranges, read one after the other (each in offset order)."""

    ranges: tuple[QueueRange, ...]


def _order(part: QueueRange) -> tuple[str, str, int, int]:
    return part.topic, part.broker_name, part.queue_id, part.start


def plan_ranges(start: QueueOffsets, end: QueueOffsets, max_records: int | None) -> list[QueueRange]:
    """Non-empty ranges per queue, split into pieces of at most ``max_records``."""
    ranges = []
    for queue in sorted(end, key=lambda q: (q.topic, q.broker_name, q.queue_id)):
        first, last = start.get(queue, 0), end[queue]
        step = max_records or max(last - first, 1)
        for piece in range(first, last, step):
            ranges.append(QueueRange(queue.topic, queue.broker_name, queue.queue_id, piece, min(piece + step, last)))
    return ranges


def with_history(ranges: list[QueueRange], options: SourceOptions, view: DriverView) -> list[QueueRange]:
    """``history=table``: each range's offsets below its queue's minimum on the broker become a range
    read from the topic's table, the rest stays with the broker."""
    if options.history != "table" or not ranges:
        return ranges
    from sparkmq.tables.layout import table_uri

    assert options.table_root is not None
    low = view.min_offsets(sorted({r.queue for r in ranges}, key=lambda q: (q.topic, q.broker_name, q.queue_id)))
    split = []
    for part in ranges:
        cut = min(max(low[part.queue], part.start), part.end)
        if cut > part.start:
            split.append(replace(part, end=cut, table=table_uri(options.table_root, part.topic)))
        if cut < part.end:
            split.append(replace(part, start=cut))
    return split


def with_addresses(ranges: list[QueueRange], view: DriverView) -> list[QueueRange]:
    """``ranges`` with their brokers' addresses as the driver's routes know them (none if unknown)."""
    return [replace(r, addresses=tuple(view.known_read_addresses(r.broker_name))) for r in ranges]


def pack_ranges(ranges: list[QueueRange], max_partitions: int | None, max_records: int | None) -> list[QueueRanges]:
    """Spark partitions for ``ranges``: one each, or packed into at most ``max_partitions`` of
    nearly equal record counts (largest range first into the lightest partition). A partition
    never grows past ``max_records``: then a range starts a partition of its own (more partitions)."""
    if not max_partitions or len(ranges) <= max_partitions:
        return [QueueRanges((part,)) for part in sorted(ranges, key=_order)]
    bins: list[list[QueueRange]] = [[] for _ in range(max_partitions)]
    loads = [0] * max_partitions
    for part in sorted(ranges, key=lambda r: (-r.size, _order(r))):
        lightest = min(range(len(bins)), key=lambda i: (loads[i], i))
        if max_records and bins[lightest] and loads[lightest] + part.size > max_records:
            bins.append([])
            loads.append(0)
            lightest = len(bins) - 1
        bins[lightest].append(part)
        loads[lightest] += part.size
    return [QueueRanges(tuple(sorted(parts, key=_order))) for parts in bins if parts]


def read_range(
    options: SourceOptions, group: str, part: QueueRange, selector: MessageSelector | None = None
) -> Iterator[pa.RecordBatch]:
    """The records of ``part`` as RecordBatches (one per pull), exactly offsets [start, end)."""
    if part.table is not None:
        yield from _table_rows(options, part)
    elif options.history == "table":
        yield from _broker_rows_or_table(options, group, part)
    else:
        yield from _broker_rows(options, group, part, selector or options.selector)


def _table_rows(options: SourceOptions, part: QueueRange) -> Iterator[pa.RecordBatch]:
    from sparkmq.tables.history import read_offsets

    assert part.table is not None
    yield from read_offsets(
        part.table,
        part.topic,
        part.broker_name,
        part.queue_id,
        part.start,
        part.end,
        options.columns,
        options.fail_on_data_loss,
    )


def _broker_rows_or_table(options: SourceOptions, group: str, part: QueueRange) -> Iterator[pa.RecordBatch]:
    """``history=table``, a range planned for the broker: the offsets its minimum moved past since the
    planning (retention ran meanwhile) are read from the table, the minimum being asked again at once."""
    from sparkmq.connector.broker_view import leased_view
    from sparkmq.tables.layout import table_uri

    assert options.table_root is not None
    strict = replace(options, fail_on_data_loss=True)
    position = part.start
    while position < part.end:
        try:
            for batch in _broker_rows(strict, group, replace(part, start=position), options.selector):
                position = int(batch.column("queueOffset")[-1].as_py()) + 1
                yield batch
            return
        except DataLossError:
            with leased_view(options.namesrv_addr, group, options.security) as view:
                low = view.min_offsets([part.queue])[part.queue]
            if low <= position:  # not retention: a loss the table cannot explain
                if options.fail_on_data_loss:
                    raise
                yield from _broker_rows(options, group, replace(part, start=position), options.selector)
                return
            cut = min(low, part.end)
            yield from _table_rows(
                options, replace(part, start=position, end=cut, table=table_uri(options.table_root, part.topic))
            )
            position = cut


def _broker_rows(
    options: SourceOptions, group: str, part: QueueRange, selector: str | MessageSelector
) -> Iterator[pa.RecordBatch]:
    # Imported here: Spark's per-query source runner (the driver side) never reads records.
    import numpy as np

    from sparkmq.connector.arrow import records_to_arrow

    for body in _bodies(options, group, part, selector):
        batch = records_to_arrow(body, part.broker_name, columns=options.columns, topic=part.topic)
        offsets = batch.column("queueOffset").to_numpy()  # in offset order
        first, last = np.searchsorted(offsets, [part.start, part.end]).tolist()
        if last - first < batch.num_rows:  # the last pull may read past the range's end
            batch = batch.slice(first, last - first)
        if batch.num_rows:
            yield batch


def _bodies(
    options: SourceOptions, group: str, part: QueueRange, selector: str | MessageSelector
) -> Iterator[bytes | memoryview]:
    """Pull bodies of ``part``: at the planned addresses, the rest (or all) through the process's client."""
    from sparkmq.connector.planned_reads import read_planned  # the client itself only when a read needs it

    position = part.start
    if part.addresses:
        rest = yield from read_planned(
            group,
            part.queue,
            part.addresses,
            part.start,
            part.end,
            options.pull_batch_size,
            selector,
            options.fail_on_data_loss,
            options.security,
            options.local_reads,
        )
        if rest is None:
            return
        position = rest
    from sparkmq.connector.broker_view import leased_view

    with leased_view(options.namesrv_addr, group, options.security) as view:
        yield from view.read_range(
            part.queue, position, part.end, options.pull_batch_size, selector, options.fail_on_data_loss
        )


def read_ranges(
    options: SourceOptions, group: str, partition: QueueRanges, selector: MessageSelector | None = None
) -> Iterator[pa.RecordBatch]:
    """The records of every range of ``partition``, range after range."""
    for part in partition.ranges:
        yield from read_range(options, group, part, selector)


def _driver_view(namesrv_addr: str, group: str, security: ClientSecurity | None) -> DriverView:
    # Imported here: Spark's Python workers unpickle the readers too, and never plan a batch.
    from sparkmq.connector.driver_view import driver_view_for

    return driver_view_for(namesrv_addr, group, security)


class _Resolver:
    """Turns start/end options into offsets for a set of queues."""

    def __init__(self, options: SourceOptions, view: DriverView) -> None:
        self.options = options
        self.view = view

    def queues(self) -> list[MessageQueue]:
        o = self.options
        return self.view.queues(o.topics, o.topic_pattern, o.assign)

    def by_mode(
        self,
        queues: list[MessageQueue],
        mode: str,
        json_offsets: dict[str, dict[str, int]] | None,
        timestamp: int | None,
        by_timestamp: dict[str, dict[str, int]] | None,
    ) -> QueueOffsets:
        low, high = self.earliest(queues), self.view.max_offsets(queues)
        if timestamp is not None:
            return self.view.offsets_for_timestamp(queues, timestamp)
        result: QueueOffsets = {}
        for queue in queues:
            if by_timestamp is not None and (stamp := self._lookup(by_timestamp, queue)) is not None:
                result[queue] = self.view.offsets_for_timestamp([queue], stamp)[queue]
                continue
            wanted = self._lookup(json_offsets, queue) if json_offsets is not None else None
            if wanted is None:
                wanted = -2 if mode in ("earliest", "group", "json") else -1
            result[queue] = (
                low[queue] if wanted == -2 else high[queue] if wanted == -1 else min(max(wanted, 0), high[queue])
            )
        return result

    def earliest(self, queues: list[MessageQueue]) -> QueueOffsets:
        """Each queue's minimum on the broker; with ``history=table``, the first offset of its table
        where the table reaches that minimum (older messages are read from the table)."""
        low = self.view.min_offsets(queues)
        if self.options.history != "table":
            return low
        from sparkmq.tables.history import held_offsets
        from sparkmq.tables.layout import table_uri

        assert self.options.table_root is not None
        for topic in sorted({q.topic for q in queues}):
            mine = [q for q in queues if q.topic == topic]
            held = held_offsets(table_uri(self.options.table_root, topic), topic, [q.queue_id for q in mine])
            for queue in mine:
                if queue.queue_id in held and held[queue.queue_id].next >= low[queue]:
                    low[queue] = min(low[queue], held[queue.queue_id].first)
        return low

    @staticmethod
    def _lookup(table: dict[str, dict[str, int]] | None, queue: MessageQueue) -> int | None:
        per_topic = (table or {}).get(queue.topic) or {}
        for key in (f"{queue.broker_name}:{queue.queue_id}", str(queue.queue_id)):
            if key in per_topic:
                return per_topic[key]
        return None


class SparkmqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader; its state lives in Spark's long-lived driver-side Python process."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        assert options.consumer_group is not None
        self.group = options.consumer_group
        self._initial: dict[str, dict[str, int]] | None = None
        self._committed: QueueOffsets = {}
        self._latest: QueueOffsets = {}
        self._available_now: QueueOffsets | None = None
        self._last_batch_at = time.monotonic()

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "group": self.group}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["options"])  # type: ignore[misc]  # unpickling runs the constructor again

    @property
    def view(self) -> DriverView:
        return _driver_view(self.options.namesrv_addr, self.group, self.options.security)

    def initialOffset(self) -> dict[str, dict[str, int]]:
        """Resolved once: the group's committed offsets where it has them, else the starting option.

        The resolved offsets are committed to the group at once, so a restart before the first
        batch finishes starts from the same place (Spark persists nothing for Python sources).
        """
        if self._initial is None:
            o = self.options
            resolver = _Resolver(o, self.view)
            queues = resolver.queues()
            committed = self.view.committed(queues)
            fresh = [q for q in queues if committed[q] < 0]
            start = {q: committed[q] for q in queues if committed[q] >= 0}
            if fresh:
                start.update(
                    resolver.by_mode(
                        fresh,
                        o.starting_offsets,
                        o.starting_offsets_json,
                        o.starting_timestamp,
                        o.starting_offsets_by_timestamp,
                    )
                )
                self.view.commit({q: start[q] for q in fresh})
            self._committed = dict(start)
            self._initial = to_json_offsets(start)
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        # Spark takes one limit; with both options set, latestOffset applies the smaller of the two.
        if self.options.max_offsets_per_trigger:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.max_bytes_per_trigger:
            return ReadMaxBytes(self.options.max_bytes_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: read up to what exists now, in batches honouring the limits."""
        self._available_now = self.view.max_offsets(_Resolver(self.options, self.view).queues())

    def latestOffset(self, start: dict[str, dict[str, int]], limit: ReadLimit) -> dict[str, dict[str, int]]:
        queues = _Resolver(self.options, self.view).queues()
        latest = self.view.max_offsets(queues)
        begin = self._check_regressions(from_json_offsets(start), latest)
        if self._available_now is not None:
            latest = {q: min(o, self._available_now.get(q, 0)) for q, o in latest.items()}
        self._latest = dict(latest)
        self._commit_finished(begin)
        for queue, offset in begin.items():  # a queue missing from the route now (broker restart) stays put
            latest[queue] = max(latest.get(queue, offset), offset)
        # A queue found since the last batch (new topic or queue) starts at 0, and counts against the limits.
        begin = {**{q: 0 for q in latest}, **begin}
        backlog = sum(latest[q] - begin[q] for q in latest)
        if self._wait_for_more(backlog, limit):
            return start
        end = (
            latest if isinstance(limit, ReadAllAvailable) else rate_limit(begin, latest, self._max_rows(begin, latest))
        )
        if any(end[q] != begin.get(q, 0) for q in end):
            self._last_batch_at = time.monotonic()
        return to_json_offsets(end)

    def _max_rows(self, begin: QueueOffsets, latest: QueueOffsets) -> int:
        """maxOffsetsPerTrigger and maxBytesPerTrigger together: the smaller limit wins (as in Kafka's source)."""
        limits = []
        if self.options.max_offsets_per_trigger:
            limits.append(self.options.max_offsets_per_trigger)
        if self.options.max_bytes_per_trigger:
            limits.append(max(1, self.options.max_bytes_per_trigger // self._average_record_bytes(begin, latest)))
        return min(limits) if limits else sum(max(latest[q] - begin.get(q, 0), 0) for q in latest)

    def _check_regressions(self, begin: QueueOffsets, latest: QueueOffsets) -> QueueOffsets:
        """A queue whose max offset is below where the query stands lost data (an ASYNC-flush broker crash
        lost its tail, or the topic was deleted and re-created): fail, or log and go on from the new end."""
        moved = {q: latest[q] for q, offset in begin.items() if q in latest and latest[q] < offset}
        if not moved:
            return begin
        what = "; ".join(
            f"queue {q.topic}/{q.broker_name}/{q.queue_id} max offset went back from {begin[q]} to {end}"
            for q, end in sorted(moved.items(), key=lambda item: (item[0].topic, item[0].queue_id))
        )
        cause = (
            "(the broker lost the tail of its log, e.g. a crash with ASYNC flush, "
            "or the topic was deleted and re-created)"
        )
        if self.options.fail_on_data_loss:
            raise DataLossError(f"{what} {cause}; set failOnDataLoss=false to resume from the new end")
        logger.warning(
            "sparkmq source: data loss: %s %s; resuming from the new end (failOnDataLoss=false)", what, cause
        )
        self.view.commit(moved)
        self._committed.update(moved)
        return {**begin, **moved}

    def _wait_for_more(self, backlog: int, limit: ReadLimit) -> bool:
        """minOffsetsPerTrigger: hold back a small batch until maxTriggerDelay has passed."""
        minimum = self.options.min_offsets_per_trigger
        if not minimum or backlog == 0 or backlog >= minimum or self._available_now is not None:
            return False
        return (time.monotonic() - self._last_batch_at) * 1000 < self.options.max_trigger_delay_ms

    def _average_record_bytes(self, begin: QueueOffsets, latest: QueueOffsets) -> int:
        """A size estimate for maxBytesPerTrigger: one record of the first queue with a backlog."""
        for queue, end in latest.items():
            first = begin.get(queue, 0)
            if end > first:
                from sparkmq.connector.broker_view import leased_view  # the reading client: only for this estimate

                with leased_view(self.options.namesrv_addr, self.group, self.options.security) as view:
                    for body in view.read_range(queue, first, first + 1, 1, "*", False):
                        return max(len(body), 1)
        return 1

    def reportLatestOffset(self) -> dict[str, dict[str, int]] | None:
        return to_json_offsets(self._latest) if self._latest else None

    def partitions(self, start: dict[str, dict[str, int]], end: dict[str, dict[str, int]]) -> list[QueueRanges]:
        o = self.options
        ranges = plan_ranges(from_json_offsets(start), from_json_offsets(end), o.max_records_per_partition)
        ranges = with_history(ranges, o, self.view)
        return pack_ranges(with_addresses(ranges, self.view), o.max_partitions, o.max_records_per_partition)

    def read(self, partition: QueueRanges) -> Iterator[pa.RecordBatch]:  # type: ignore[override]  # ours from partitions()
        return read_ranges(self.options, self.group, partition)

    def commit(self, end: dict[str, dict[str, int]]) -> None:
        """Spark's own commit (one batch late): a backstop for ``latestOffset``'s commits."""
        self._commit_finished(from_json_offsets(end))

    def _commit_finished(self, offsets: QueueOffsets) -> None:
        """Move the group's broker offsets forward to what Spark has finished (never backwards, and never
        past the queue's last known end: Spark's late ``commit`` may name offsets from before a data loss)."""
        ahead = {q: o for q, o in offsets.items() if self._committed.get(q, -1) < o <= self._latest.get(q, o)}
        if ahead:
            self.view.commit(ahead)
            self._committed.update(ahead)


class SparkmqBatchReader(DataSourceReader):
    """``spark.read.format("sparkmq")``: starting to ending offsets (or timestamps), once."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.group = options.consumer_group or BATCH_READER_GROUP
        self.selector = options.selector

    def partitions(self) -> list[QueueRanges]:
        o = self.options
        view = _driver_view(o.namesrv_addr, self.group, o.security)
        resolver = _Resolver(o, view)
        queues = resolver.queues()
        start = resolver.by_mode(
            queues, o.starting_offsets, o.starting_offsets_json, o.starting_timestamp, o.starting_offsets_by_timestamp
        )
        end = resolver.by_mode(queues, "latest", o.ending_offsets_json, o.ending_timestamp, None)
        ranges = plan_ranges(start, {q: max(end[q], start[q]) for q in queues}, o.max_records_per_partition)
        ranges = with_history(ranges, o, view)
        return pack_ranges(with_addresses(ranges, view), o.max_partitions, o.max_records_per_partition)

    def read(self, partition: QueueRanges) -> Iterator[pa.RecordBatch]:  # type: ignore[override]  # ours from partitions()
        return read_ranges(self.options, self.group, partition, self.selector)


class SparkmqPushdownBatchReader(SparkmqBatchReader):
    """A batch reader taking Spark's filters (``filterPushdown=true``; Spark must run with
    ``spark.sql.python.filterPushdown.enabled=true``, or it refuses any reader that takes them)."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        from sparkmq.connector.filters import pushed_selector

        self.selector = pushed_selector(filters, self.options.selector)
        return filters  # Spark still checks each row: the broker filters tags by hash


class SparkmqDataSource(DataSource):
    """``format("sparkmq")``: readers and writers for sparkmq / RocketMQ topics."""

    @classmethod
    def name(cls) -> str:
        return "sparkmq"

    def schema(self) -> str:
        # Spark asks for the schema when a read is defined: reject bad options right here.
        from sparkmq.connector.columns import schema_ddl

        return schema_ddl(SourceOptions.parse(self.options).columns)

    def reader(self, schema: StructType) -> SparkmqBatchReader:
        options = SourceOptions.parse(self.options, streaming=False)
        return SparkmqPushdownBatchReader(options) if options.filter_pushdown else SparkmqBatchReader(options)

    def streamReader(self, schema: StructType) -> SparkmqStreamReader:
        return SparkmqStreamReader(SourceOptions.parse(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        from sparkmq.connector.sink_options import SinkOptions
        from sparkmq.sink import SparkmqBatchWriter

        options = SinkOptions.parse(self.options)
        if options.delivery_guarantee == "exactly-once":  # hook: exactly-once sink (issue 9)
            raise OptionError(
                "deliveryGuarantee",
                "exactly-once is for streaming writes (writeStream); batch writes are at-least-once",
            )
        return SparkmqBatchWriter(options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:
        from sparkmq.connector.sink_options import SinkOptions
        from sparkmq.sink import SparkmqStreamWriter

        options = SinkOptions.parse(self.options)
        if options.delivery_guarantee == "exactly-once":  # hook: exactly-once sink (issue 9)
            from sparkmq.sink import SparkmqExactlyOnceStreamWriter

            return SparkmqExactlyOnceStreamWriter(options, schema, self.options.get("checkpointLocation"))
        return SparkmqStreamWriter(options, schema)


def register(spark: Any) -> None:
    """Register the ``sparkmq`` format with a SparkSession (auto-registration also works)."""
    spark.dataSource.register(SparkmqDataSource)
