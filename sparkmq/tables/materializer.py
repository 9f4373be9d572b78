"""The broker's table writer: each table-enabled topic's durable messages, exactly once, in its Delta table.

Every interval, for each topic, every queue is read from the table's transaction version (the next
queue offset to write; the queue's min offset for a new table, which backfills it), and all queues'
rows go into ONE Delta commit carrying one application transaction per queue (``layout.app_id``).
The transaction and the rows commit atomically, so a crash anywhere leaves either both or neither,
and the next cycle resumes from what the table says. Only the topic's own queues are read: half and
rolled-back transactional messages live in ``RMQ_SYS_TRANS_HALF_TOPIC`` and never reach them.

A cycle that fails (an unwritable root, a corrupt log, a table someone else changed) marks the table
stalled with the reason and is retried next interval; the stream is never affected.

Every ``upkeep_interval_s`` a table (and its reject table) is compacted, vacuumed and checkpointed after
its cycle (:mod:`.upkeep`): the many small files one commit per interval leaves become few, with the rows
and the queues' transactions unchanged.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import ColumnProperties, CommitProperties, DeltaTable, Transaction, WriterProperties, write_deltalake

from sparkmq.message.record import iter_records
from sparkmq.store import MessageStore
from sparkmq.tables.attributes import STORE_DATE, TableSettings
from sparkmq.tables.json_rows import json_schema, parse_json_rows
from sparkmq.tables.layout import (
    DLQ_SCHEMA,
    METADATA_COLUMNS,
    RAW_SCHEMA,
    STORE_DATE_COLUMN,
    app_id,
    dlq_topic,
    table_uri,
)
from sparkmq.tables.queue_rows import READER_GROUP, QueueRows, read_rows
from sparkmq.tables.upkeep import checkpoint, compact, vacuum

logger = logging.getLogger(__name__)
MAX_ROWS_PER_COMMIT = 262_144  # one topic's rows in one commit at most; a cycle that hits it runs again at once
WRITER_KEY = "sparkmq.writer"  # the commitInfo entry naming the broker that wrote a commit
OK, STALLED = "ok", "stalled"
# Snappy, no dictionaries: bodies and ids are high-entropy, and the few repeating columns compress as well
# plain (same file size). bench/table_cycle_bench.py: at most ~10% less CPU per row than the defaults.
WRITER_PROPERTIES = WriterProperties(
    compression="SNAPPY", default_column_properties=ColumnProperties(dictionary_enabled=False)
)
# A checkpoint every 10 commits (Delta's own default; deltalake's is 100): a reader's snapshot then replays one
# Parquet checkpoint and at most 9 JSON commits, not every commit since the table began.
TABLE_CONFIGURATION = {"delta.checkpointInterval": "10"}


@dataclass(frozen=True)
class QueueLag:
    """One queue: the table's next offset against the queue's offsets, and how old the oldest row missing is."""

    queue_id: int
    table_offset: int  # -1: not known (the table could not be read)
    min_offset: int
    max_offset: int
    lag_seconds: float


@dataclass(frozen=True)
class TableStatus:
    """A topic's table as the last cycle left it."""

    topic: str
    uri: str
    state: str  # "ok" | "stalled"
    reason: str
    queues: tuple[QueueLag, ...] = ()
    table_version: int = -1
    updated_ms: int = field(default_factory=lambda: int(time.time() * 1000))


class _Table:
    """One Delta table, its handle kept between cycles (``memory://`` tables live only in it)."""

    def __init__(
        self, uri: str, topic: str, schema: pa.Schema, partition_by: list[str] | None, storage: Mapping[str, str]
    ) -> None:
        self.uri, self.topic = uri, topic
        self.delta = DeltaTable.create(
            uri,
            schema=schema,
            partition_by=partition_by,
            mode="ignore",
            storage_options=dict(storage) or None,
            configuration=TABLE_CONFIGURATION,
        )

    def offsets(self, queue_ids: list[int]) -> dict[int, int | None]:
        """Each queue's next offset to write (None: none written), from the table's latest version.

        Raises :class:`ForeignTableError` when the table lacks a metadata column (someone else's table)
        or claims offsets past a queue's end (checked by the caller through the returned versions).
        """
        self.delta.update_incremental()
        names = {field.name for field in self.delta.schema().fields}
        missing = [name for name in METADATA_COLUMNS if name not in names]
        if missing:
            raise ForeignTableError(
                f"{self.uri} lacks the columns {', '.join(missing)} (version {self.delta.version()}): "
                "someone else wrote it; restore it or move it away"
            )
        return {q: self.delta.transaction_version(app_id(self.topic, q)) for q in queue_ids}

    def append(self, rows: pa.Table, next_offsets: Mapping[int, int], writer: str) -> None:
        """Append ``rows`` and move the queues' transactions to ``next_offsets``, in one commit (new
        columns, a newly declared json column or the partition date, are added by schema evolution)."""
        transactions = [Transaction(app_id(self.topic, q), offset) for q, offset in sorted(next_offsets.items())]
        write_deltalake(
            self.delta,
            rows,
            mode="append",
            schema_mode="merge",
            writer_properties=WRITER_PROPERTIES,
            commit_properties=CommitProperties(app_transactions=transactions, custom_metadata={WRITER_KEY: writer}),
        )


class Materializer:
    """Writes the tables of the topics ``settings()`` returns (topic → its enabled settings) under ``root``."""

    def __init__(
        self,
        store: MessageStore,
        broker_name: str,
        root: str,
        interval_s: float,
        settings: Callable[[], Mapping[str, TableSettings]],
        max_rows: int = MAX_ROWS_PER_COMMIT,
        upkeep_interval_s: float = 0.0,
        vacuum_retention_hours: int = 168,
        storage_options: Mapping[str, str] | None = None,
        replicated: Callable[[], float] = lambda: math.inf,
    ) -> None:
        self.store, self.broker_name, self.root = store, broker_name, root
        self.interval_s, self.settings, self.max_rows = interval_s, settings, max_rows
        self.upkeep_interval_s, self.vacuum_retention_hours = upkeep_interval_s, vacuum_retention_hours
        self.storage_options = dict(storage_options or {})  # deltalake's, e.g. an S3 endpoint and its keys
        self.replicated = replicated  # the CommitLog offset a failover keeps (the replicas' confirmed one)
        self._upkept: dict[str, float] = {}  # topic → monotonic time of its table's last upkeep
        self.statuses: dict[str, TableStatus] = {}
        self.floors: dict[str, int] = {}  # topic → lowest CommitLog offset its table still lacks
        self._tables: dict[str, _Table] = {}
        self._cycled = False  # until a first cycle ran, retention keeps everything
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the thread ------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sparkmq-table-writer", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                behind = self.cycle()
            except Exception:  # the writer outlives any one bad cycle
                logger.exception("the table writer's cycle failed")
                behind = False
            if not behind:
                self._stop.wait(self.interval_s)

    # -- one cycle -------------------------------------------------------------------------
    def cycle(self) -> bool:
        """Materialize every table once; True when some table hit ``max_rows`` (more is waiting)."""
        wanted = dict(self.settings())
        for topic in list(self.statuses):
            if topic not in wanted:  # opted out: its table stays, its status and retention hold go
                self.statuses.pop(topic, None)
                self.floors.pop(topic, None)
                self._tables.pop(topic, None)
                self._upkept.pop(topic, None)
        behind = False
        for topic, settings in wanted.items():
            try:
                more = self._materialize(topic, settings)
                behind |= more
                if not more:  # a table still catching up is compacted once it has
                    self._upkeep(topic, settings)
            except Exception as exc:  # any failure stalls this table only; the next cycle retries it
                self._stall(topic, exc)
        self._cycled = True
        return behind

    def _stall(self, topic: str, exc: Exception) -> None:
        reason = f"{type(exc).__name__}: {exc}"[:500]
        previous = self.statuses.get(topic)
        if previous is None or previous.reason != reason:
            logger.error("table of topic %s stalled: %s", topic, reason)
        self._tables.pop(topic, None)
        self._tables.pop(dlq_topic(topic), None)
        known = {q.queue_id: q.table_offset for q in previous.queues} if previous is not None else {}
        queue_ids = self.store.queue_ids().get(topic, [])
        queues = [QueueLag(q, known.get(q, -1), 0, 0, 0.0) for q in queue_ids]  # -1: not known yet
        uri = table_uri(self.root, topic)
        self.statuses[topic] = TableStatus(topic, uri, STALLED, reason, self._lags(topic, queues))

    def _table(self, topic: str, schema: pa.Schema, partition_by: list[str] | None) -> _Table:
        table = self._tables.get(topic)
        if table is None:
            uri = table_uri(self.root, topic)
            table = self._tables[topic] = _Table(uri, topic, schema, partition_by, self.storage_options)
        return table

    def _materialize(self, topic: str, settings: TableSettings) -> bool:
        queue_ids = self.store.queue_ids().get(topic, [])
        json = settings.format == "json"
        schema = json_schema(settings.columns) if json else RAW_SCHEMA
        main = self._table(topic, _with_partition(schema, settings), _partition_columns(settings))
        offsets = main.offsets(queue_ids)
        dlq = self._table(dlq_topic(topic), DLQ_SCHEMA, None) if json else None
        dlq_offsets = dlq.offsets(queue_ids) if dlq is not None else {}
        self._check_not_ahead(topic, offsets)
        self._check_not_ahead(topic, dlq_offsets)
        # None: nothing written yet, so from the queue's start (read_rows moves up to its min offset)
        starts = {q: min(offsets[q] or 0, dlq_offsets[q] or 0) if dlq else offsets[q] or 0 for q in queue_ids}
        for q in queue_ids:
            held, low = offsets[q], self.store.min_offset_in_queue(topic, q)
            if held is not None and held < low:  # retention ran while no writer held it back
                logger.warning("table of %s: queue %d offsets %d..%d are gone from the CommitLog", topic, q, held, low)
        per_queue, replicated = max(self.max_rows // max(len(queue_ids), 1), 1), self.replicated()
        reads = [read_rows(self.store, self.broker_name, topic, q, starts[q], per_queue, replicated) for q in queue_ids]
        advanced = _advanced(reads, offsets)
        rows = _concat(reads)
        if dlq is not None:
            good, rejects = parse_json_rows(rows, settings.columns)
            dlq_advanced = _advanced(reads, dlq_offsets)
            if dlq_advanced:
                dlq.append(_from(rejects, dlq_offsets), dlq_advanced, self.broker_name)
            rows = good
        if advanced:
            main.append(_with_partition_values(_from(rows, offsets), settings), advanced, self.broker_name)
        ends = {r.queue_id: r.next_offset for r in reads}
        self.statuses[topic] = TableStatus(
            topic,
            main.uri,
            OK,
            "",
            self._lags(topic, [QueueLag(q, ends[q], 0, 0, 0.0) for q in queue_ids]),
            main.delta.version(),
        )
        return any(r.count >= per_queue for r in reads)

    def _upkeep(self, topic: str, settings: TableSettings) -> None:
        """Compact and vacuum ``topic``'s table (and its reject table) when its interval has passed."""
        now = time.monotonic()
        if self.upkeep_interval_s <= 0 or now - self._upkept.setdefault(topic, now) < self.upkeep_interval_s:
            return
        for name in (topic, dlq_topic(topic)) if settings.format == "json" else (topic,):
            uri = table_uri(self.root, name)
            done = compact(uri, storage_options=self.storage_options)
            removed = vacuum(uri, self.vacuum_retention_hours, self.storage_options)
            checkpoint(uri, self.storage_options)
            logger.info(
                "table %s: %d files compacted into %d, %d vacuumed",
                uri,
                done.files_removed,
                done.files_added,
                len(removed),
            )
        self._upkept[topic] = now

    def _check_not_ahead(self, topic: str, offsets: Mapping[int, int | None]) -> None:
        for queue_id, start in offsets.items():
            end = self.store.max_offset_in_queue(topic, queue_id)
            if start is not None and start > end:
                raise ForeignTableError(
                    f"the table holds queue {queue_id} up to offset {start}, past the queue's max offset {end}: "
                    "it was written by someone else, or for another broker's queues"
                )

    def _lags(self, topic: str, queues: tuple[QueueLag, ...] | list[QueueLag]) -> tuple[QueueLag, ...]:
        """The queues' current offsets and lag seconds; also records the topic's retention floor."""
        now = time.time()
        lags, floor = [], None
        for lag in queues:
            low = self.store.min_offset_in_queue(topic, lag.queue_id)
            high = self.store.max_offset_in_queue(topic, lag.queue_id)
            seconds, physical = 0.0, None
            if lag.table_offset < high:
                physical, stored_ms = _first_missing(self.store, topic, lag.queue_id, max(lag.table_offset, low))
                seconds = max(now - stored_ms / 1000, 0.0) if stored_ms else 0.0
            if physical is not None:
                floor = physical if floor is None else min(floor, physical)
            lags.append(QueueLag(lag.queue_id, lag.table_offset, low, high, seconds))
        if floor is None:
            self.floors.pop(topic, None)
        else:
            self.floors[topic] = floor
        return tuple(lags)

    def retention_floor(self) -> int | None:
        """The lowest CommitLog offset some table still lacks (None: every table is complete)."""
        return min(self.floors.values(), default=None) if self._cycled else 0


class ForeignTableError(RuntimeError):
    """A table this broker did not write as it is: other columns, or offsets its queues do not have."""


def _advanced(reads: list[QueueRows], committed: Mapping[int, int | None]) -> dict[int, int]:
    """Queue → its new next offset, for the queues whose table transaction must move."""
    return {r.queue_id: r.next_offset for r in reads if r.next_offset != (committed[r.queue_id] or 0)}


def _concat(reads: list[QueueRows]) -> pa.Table:
    batches = [batch for read in reads for batch in read.batches]
    return pa.Table.from_batches(batches, RAW_SCHEMA) if batches else RAW_SCHEMA.empty_table()


def _from(rows: pa.Table, offsets: Mapping[int, int | None]) -> pa.Table:
    """``rows`` without those a table already holds (its queue's transaction version is past them)."""
    if rows.num_rows == 0 or all(v is None for v in offsets.values()):
        return rows
    queue_ids = rows.column("queueId").to_numpy()
    floor_of = np.zeros(int(queue_ids.max()) + 1, dtype=np.int64)
    for queue_id, offset in offsets.items():
        if offset is not None and queue_id < len(floor_of):
            floor_of[queue_id] = offset
    keep = rows.column("queueOffset").to_numpy() >= floor_of[queue_ids]
    return rows if keep.all() else rows.filter(pa.array(keep))  # usually all: a filter copies every column


def _partition_columns(settings: TableSettings) -> list[str] | None:
    if settings.partition_by is None:
        return None
    return [STORE_DATE_COLUMN if settings.partition_by == STORE_DATE else settings.partition_by]


def _with_partition(schema: pa.Schema, settings: TableSettings) -> pa.Schema:
    if settings.partition_by == STORE_DATE:
        return schema.append(pa.field(STORE_DATE_COLUMN, pa.date32()))
    return schema


def _with_partition_values(rows: pa.Table, settings: TableSettings) -> pa.Table:
    if settings.partition_by == STORE_DATE:
        return rows.append_column(STORE_DATE_COLUMN, pc.cast(rows.column("storeTimestamp"), pa.date32()))
    return rows


def _first_missing(store: MessageStore, topic: str, queue_id: int, offset: int) -> tuple[int | None, int]:
    """The CommitLog offset and store time (ms) of the queue's first record from ``offset`` (None, 0 if none)."""
    result = store.get_messages(READER_GROUP, topic, queue_id, offset, 1)
    if result.message_count == 0:
        return None, 0
    record = next(iter_records(result.body()))
    return int(result.physical_offsets[0]), record.store_timestamp
