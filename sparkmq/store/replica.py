"""Raw CommitLog bytes for replication: read a run on the master, append it at its offset on a slave.

RocketMQ 4.x's HA copies the CommitLog byte for byte (``HAConnection.WriteSocketService`` reads
``getCommitLogData(offset)``, ``HAClient.dispatchReadRequest`` calls ``appendToCommitLog``), so a
slave's records sit at the same physical offsets as the master's and carry the master's queue
offsets. A run never crosses a segment end (both sides use the same ``mapedFileSizeCommitLog``),
but it may end inside a record.

Unlike Java's slave, which appends whatever arrives, a slave here appends only whole records it has
checked (``whole_records``: the framing, each record's own offset and lengths, its body CRC) and holds
the incomplete one after them until the rest comes (``MessageStore.append_replica``). A run that
fails a check is refused (:class:`ReplicaDamage`): nothing of it is stored, and the link starts again
from the slave's own end, so its CommitLog stays a byte-identical prefix of the master's.
"""

from __future__ import annotations

import struct

from sparkmq.errors import StoreError
from sparkmq.message import layout as L
from sparkmq.message.record import blank_filler
from sparkmq.store.commitlog import CommitLog, ScannedRecord, check_record

_SIZE_MAGIC = struct.Struct(">ii")


class ReplicaDamage(StoreError):
    """Replicated bytes at ``offset`` are no valid record: the run is refused."""

    def __init__(self, offset: int, detail: str) -> None:
        super().__init__(f"replicated bytes at CommitLog offset {offset}: {detail}")
        self.offset = offset
        self.detail = detail


def whole_records(data: bytes | memoryview, offset: int, file_bytes: int) -> int:
    """How many leading bytes of ``data`` (the master's bytes at ``offset``, a record's start) are whole
    records or an END_OF_FILE filler, each checked; the rest is an incomplete record. No length read
    from ``data`` is trusted beyond its segment's end. Raises :class:`ReplicaDamage` at the first
    record that fails a check."""
    return checked_records(data, offset, file_bytes)[0]


def checked_records(data: bytes | memoryview, offset: int, file_bytes: int) -> tuple[int, list[ScannedRecord]]:
    """``whole_records`` and the records it checked, in log order (what the slave dispatches: no second scan)."""
    records: list[ScannedRecord] = []
    view = memoryview(data)
    room = file_bytes - offset % file_bytes  # from data[0] to its segment's end
    pos = 0
    while pos < len(view):
        left = room - pos
        if left <= 0:
            raise ReplicaDamage(offset + pos, "the run crosses its segment's end")
        if left < L.END_FILE_MIN_BLANK_LENGTH:  # a filler cut short by the segment's end
            if len(view) - pos < left:
                break
            if bytes(view[pos : pos + left]) != blank_filler(left)[:left]:
                raise ReplicaDamage(offset + pos, f"{left} bytes before the segment's end are no END_OF_FILE filler")
            pos += left
            continue
        if len(view) - pos < 8:
            break
        size, magic = _SIZE_MAGIC.unpack_from(view, pos)
        if magic == L.BLANK_MAGIC_CODE and size == left:
            whole = min(len(view) - pos, left)  # the filler and the unused rest of its segment
            if whole < left:
                break
            pos += left
            continue
        if magic != L.MESSAGE_MAGIC_CODE or not L.RECORD_FIXED_BYTES <= size <= left:
            raise ReplicaDamage(
                offset + pos, f"a head of size {size}, magic {magic:#x}, {left} bytes to the segment's end"
            )
        if len(view) - pos < size:
            break
        record = check_record(view, pos, pos + size, offset, True)
        if record is None:
            raise ReplicaDamage(
                offset + pos, f"the record of {size} bytes fails its checks (offset, lengths, body CRC)"
            )
        records.append(record)
        pos += size
    return pos, records


def read_run(commitlog: CommitLog, offset: int, max_bytes: int) -> bytes | None:
    """Up to ``max_bytes`` written bytes from ``offset`` to the end of its segment's written part.

    ``b""`` when nothing is written at ``offset`` yet; None when ``offset`` is below the log's
    minimum (deleted) or is not inside the log at all.
    """
    if offset == commitlog.max_offset:
        return b""
    mapped = commitlog.queue.find(offset)
    if mapped is None:
        return None
    pos = offset - mapped.start_offset
    size = min(mapped.write_position - pos, max_bytes)
    return mapped.read(pos, size) if size > 0 else b""


def append_run(commitlog: CommitLog, offset: int, data: bytes | memoryview) -> None:
    """Append ``data`` (the master's bytes at ``offset``) to the end of ``commitlog``.

    An empty log takes ``offset`` as its start (it must begin a segment: the master streams a
    new slave from the start of its newest segment). A non-empty log must end exactly at
    ``offset``: anything else would leave a gap or write a record twice.
    """
    queue = commitlog.queue
    if queue.files:
        if offset != commitlog.max_offset:
            raise StoreError(
                f"replicated bytes at offset {offset} do not continue this CommitLog, which ends at "
                f"{commitlog.max_offset}"
            )
    elif offset % queue.file_bytes:
        raise StoreError(
            f"an empty CommitLog cannot start at offset {offset}: not a multiple of the segment size "
            f"{queue.file_bytes} (do master and slave use the same mapedFileSizeCommitLog?)"
        )
    mapped = queue.last_file(offset)
    if len(data) > mapped.remaining:
        raise StoreError(
            f"{len(data)} replicated bytes at offset {offset} overflow segment {mapped.path.name} "
            f"({mapped.remaining} bytes left; do master and slave use the same mapedFileSizeCommitLog?)"
        )
    mapped.append(data)
