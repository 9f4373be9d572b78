"""Short-circuit local reads: a Spark task on the broker's own host reads a queue from the store's files.

HDFS lets a reader beside the DataNode open a block's file itself ("short-circuit local reads");
this is the same idea for a broker's store. A pull over loopback costs the broker a request, a
gather and a kernel copy of every record into the socket, and the task a copy back out: in
bench/spark_source_bench.py the broker's share alone was ~0.15 CPU-s per 1M records. Here the task
maps the CommitLog segments read-only and gathers the records with the walk of the broker's own
C gather (``_queueread.gather_into``: store/reads.py's rules, into a kept buffer, each unit and each
record's head checked before a byte is copied), so each body is byte for byte what a pull without a filter answers.

Where it applies (everything else, and the rest of a range after any doubt, reads over the socket):

* the broker's GET_BROKER_CONFIG names absolute store directories that this process can open;
* a probe proves them to be that broker's store: the range's first record pulled over the socket
  equals the same record read from the files (its store timestamp, physical offset and body CRC
  make it unique). Every range: a broker that restarted on another store fails it;
* the read has no filter (tags and SQL92 are the broker's to evaluate) and no ACL credentials (the
  broker checks an account's permission on each topic; the files cannot);
* every unit's segment exists, every unit's size and offset are ones a record can have, and every
  record read carries the total size, magic, queue id, queue offset and physical offset its unit
  promises (a unit left from before a crash's truncation, or damaged on the disk, fails this).
  Nothing read from the files is trusted for a length: a damaged unit declines the read and the
  broker, which repairs such units from its CommitLog, serves the rest;
* no record read lies in the CommitLog range whose body CRCs the broker has not checked since it
  started (its ``unverified`` file, store/body_verify.py): the broker checks those as it serves them.

Files are opened per range (the probe and the reads share them) and closed at its end: a mapping
held on would keep a segment that retention deleted on the disk.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType

from sparkmq.client.pull_wire import decode_pull, pull_request_fields
from sparkmq.client.selector import MessageSelector
from sparkmq.connector.direct_pull import KeptBuffers, PullConnection
from sparkmq.errors import SparkmqError
from sparkmq.native import queueread
from sparkmq.protocol import RequestCode, ResponseCode
from sparkmq.protocol.bodies import MessageQueue

logger = logging.getLogger(__name__)
UNIT_BYTES = 20  # a ConsumeQueue unit: physical offset i64, size i32, tags code i64
BLANK_UNIT_SIZE = 0x7FFFFFFF
UNVERIFIED_FILE = "unverified"  # "<from> <to>" of the range not yet checked (store/body_verify.py)
_UNIT = struct.Struct(">qiq")
MAX_SEGMENTS = 16  # what one gather may copy from (queueread.c MAX_SEGMENTS)
READ_BYTES = 4 * 1024 * 1024  # a body at most (a kept buffer's size); one record always goes, however large


class LocalReadDeclined(SparkmqError):
    """The files cannot serve this read (gone, moved, or not what the units promise): pull it instead."""

    def __init__(self, offset: int, why: str) -> None:
        super().__init__(f"local read at offset {offset} declined: {why}")
        self.offset = offset


@dataclass(frozen=True)
class StoreFiles:
    """Where a broker keeps its CommitLog and ConsumeQueues, and their segment sizes."""

    commitlog_dir: str
    consumequeue_dir: str
    commitlog_file_bytes: int
    consumequeue_file_bytes: int

    @property
    def unverified_path(self) -> str:
        return os.path.join(os.path.dirname(self.consumequeue_dir), UNVERIFIED_FILE)

    def unverified(self) -> tuple[int, int] | None:
        """The CommitLog range whose body CRCs the broker has not checked yet (None: none; an
        unreadable file: all of it)."""
        try:
            with open(self.unverified_path, "rb") as handle:
                text = handle.read(64)
        except FileNotFoundError:
            return None
        except OSError:
            return 0, 2**63 - 1
        try:
            low, high = (int(part) for part in text.split())
        except ValueError:
            return 0, 2**63 - 1
        return low, high

    @classmethod
    def from_broker_config(cls, properties: Mapping[str, str]) -> StoreFiles | None:
        """From GET_BROKER_CONFIG's keys (RocketMQ's); None unless both directories are absolute and here."""
        root = properties.get("storePathRootDir", "")
        commitlog = properties.get("storePathCommitLog") or os.path.join(root, "commitlog")
        consumequeue = os.path.join(root, "consumequeue")
        try:
            commitlog_bytes = int(properties["mapedFileSizeCommitLog"])
            consumequeue_bytes = int(properties["mapedFileSizeConsumeQueue"])
        except (KeyError, ValueError):
            return None
        if commitlog_bytes <= 0 or consumequeue_bytes < UNIT_BYTES:
            return None
        if not (os.path.isabs(commitlog) and os.path.isabs(consumequeue)):
            return None
        if not (os.path.isdir(commitlog) and os.path.isdir(consumequeue)):
            return None
        return cls(commitlog, consumequeue, commitlog_bytes, consumequeue_bytes - consumequeue_bytes % UNIT_BYTES)


class LocalQueueReads:
    """Reads of one queue from the store's files; a context manager (closes what it opened)."""

    def __init__(self, files: StoreFiles, topic: str, queue_id: int) -> None:
        self.files = files
        self.queue_id = queue_id
        self.topic = topic.encode()
        self._queue_dir = os.path.join(files.consumequeue_dir, topic, str(queue_id))
        self._unit_files: dict[int, int] = {}  # file start (bytes) -> fd
        self._segments: dict[int, tuple[mmap.mmap, memoryview]] = {}  # base -> mapping, its view

    def __enter__(self) -> LocalQueueReads:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        for fd in self._unit_files.values():
            os.close(fd)
        self._unit_files.clear()
        for mapping, view in self._segments.values():
            view.release()
            mapping.close()
        self._segments.clear()

    def read(self, offset: int, max_count: int) -> tuple[memoryview | bytes | None, int]:
        """Records of queue offsets from ``offset`` (at most ``max_count``, never across a unit file):
        their body (None when every unit read was blank) and the offset after the units read.
        Raises LocalReadDeclined when the files cannot serve it.

        The body is a view of one of the calling thread's kept buffers: it stays valid while it is
        referred to (a buffer is lent again only once nothing refers to it)."""
        assert queueread is not None
        units = self._units(offset, max_count)
        unverified = self.files.unverified()
        if unverified is not None and _touches(units, *unverified):
            raise LocalReadDeclined(offset, "the broker has not checked the body CRCs of its records yet")
        first = int.from_bytes(units[:8], "big", signed=True)
        mapped = [self._segment(offset, first)]
        out = _kept_buffers().take(READ_BYTES)
        while True:
            segments = tuple((base, view, len(view)) for base, view in mapped)
            read = queueread.gather_into(
                units, offset, 0, None, max_count, len(out), segments, self.queue_id, self.topic, out
            )
            if not isinstance(read, int):
                break
            if read < 0:  # the broker repairs it when the read is pulled
                raise LocalReadDeclined(offset, f"ConsumeQueue unit {offset - 1 - read} is damaged")
            if len(mapped) == MAX_SEGMENTS:
                raise LocalReadDeclined(offset, f"a read over more than {MAX_SEGMENTS} segments")
            mapped.append(self._segment(offset, read))
        if read is None:
            raise LocalReadDeclined(offset, "a record runs past the end of its segment")
        scanned, taken, written = read
        if not taken:
            return None, offset + scanned
        return (memoryview(out)[:written] if isinstance(written, int) else written), offset + scanned

    def _units(self, offset: int, max_count: int) -> bytes:
        file_bytes = self.files.consumequeue_file_bytes
        at = offset * UNIT_BYTES
        start = at - at % file_bytes
        fd = self._unit_files.get(start)
        if fd is None:
            try:
                fd = os.open(os.path.join(self._queue_dir, f"{start:020d}"), os.O_RDONLY)
            except OSError as exc:
                raise LocalReadDeclined(offset, f"no ConsumeQueue file: {exc.strerror}") from exc
            self._unit_files[start] = fd
        count = min(max_count, (start + file_bytes - at) // UNIT_BYTES)
        units = os.pread(fd, count * UNIT_BYTES, at - start)
        if len(units) < UNIT_BYTES:
            raise LocalReadDeclined(offset, "the ConsumeQueue file ends before the unit")
        return units[: len(units) - len(units) % UNIT_BYTES]

    def _segment(self, offset: int, physical: int) -> tuple[int, memoryview]:
        file_bytes = self.files.commitlog_file_bytes
        base = physical - physical % file_bytes
        known = self._segments.get(base)
        if known is None:
            path = os.path.join(self.files.commitlog_dir, f"{base:020d}")
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError as exc:
                raise LocalReadDeclined(offset, f"no CommitLog segment at {base}: {exc.strerror}") from exc
            try:
                size = os.fstat(fd).st_size
                if size == 0:
                    raise LocalReadDeclined(offset, f"the CommitLog segment at {base} is empty")
                mapping = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
            finally:
                os.close(fd)
            known = self._segments[base] = (mapping, memoryview(mapping))
        return base, known[1]


def _touches(units: bytes, low: int, high: int) -> bool:
    """Whether a record a non-blank unit names may lie in ``[low, high)``."""
    for physical, size, _tags in _UNIT.iter_unpack(units):
        if size != BLANK_UNIT_SIZE and physical < high and physical + size > low:
            return True
    return False


_per_thread = threading.local()


def _kept_buffers() -> KeptBuffers:
    """The calling thread's kept buffers (a Spark task is one thread; a buffer is never shared)."""
    try:
        buffers: KeptBuffers = _per_thread.buffers
    except AttributeError:
        buffers = _per_thread.buffers = KeptBuffers()
    return buffers


#: Where each pull connection's broker keeps its store, as readable here (None: not here, or not its own).
_stores: weakref.WeakKeyDictionary[PullConnection, StoreFiles | None] = weakref.WeakKeyDictionary()


def usable(expression: str | MessageSelector) -> bool:
    """Whether reads with this selector may go to the files (no filter: the broker evaluates those)."""
    return queueread is not None and MessageSelector.of(expression).expression in ("", "*")


def store_files(connection: PullConnection) -> StoreFiles | None:
    """Where ``connection``'s broker keeps its store, when it is readable here: asked once per
    connection (GET_BROKER_CONFIG). None for a connection with ACL credentials: the broker checks the
    account's permission on each topic, the files cannot."""
    if connection.signed:
        return None
    if connection not in _stores:
        from sparkmq.protocol.ops_bodies import parse_properties_text  # once per connection: kept out of workers' heaps

        answer, body = connection.answer(connection.send_request(RequestCode.GET_BROKER_CONFIG, {}))
        found = None
        if answer.code == ResponseCode.SUCCESS:
            found = StoreFiles.from_broker_config(parse_properties_text(bytes(body)))
        _stores[connection] = found
        if found is not None:
            logger.info("broker %s keeps its store at %s, readable here", connection.address, found.commitlog_dir)
    return _stores[connection]


def proven(connection: PullConnection, reads: LocalQueueReads, group: str, queue: MessageQueue, offset: int) -> bool:
    """Whether ``reads`` may serve this range: its first record, pulled and read from the files, is
    the same (``same_store``). Run for every range, so a broker that restarted on another store is
    never read from the old one's files; files found foreign are not asked again over ``connection``."""
    same = same_store(connection, reads, group, queue, offset)
    if same is False:
        logger.warning(
            "the files at %s are not broker %s's store; pulling from it", reads.files.commitlog_dir, connection.address
        )
        _stores[connection] = None
    return same is True


def same_store(
    connection: PullConnection, reads: LocalQueueReads, group: str, queue: MessageQueue, offset: int
) -> bool | None:
    """Whether the record at ``offset`` pulled over ``connection`` equals the one ``reads`` reads from
    its files (None: the broker has no record there to compare)."""
    command, pulled = connection.answer(connection.send(pull_request_fields(group, queue, offset, 1)))
    if not decode_pull(queue, offset, command)[0].found:
        return None
    try:
        local, _ = reads.read(offset, 1)
    except LocalReadDeclined:
        return False
    return local == bytes(pulled)
