"""Raw CommitLog bytes for replication: read a run on the master, append it at its offset on a slave.

RocketMQ 4.x's HA copies the CommitLog byte for byte (``HAConnection.WriteSocketService`` reads
``getCommitLogData(offset)``, ``HAClient.dispatchReadRequest`` calls ``appendToCommitLog``), so a
slave's records sit at the same physical offsets as the master's and carry the master's queue
offsets. A run never crosses a segment end (both sides use the same ``mapedFileSizeCommitLog``),
but it may end inside a record: the slave dispatches only the complete records
(``MessageStore.append_replica`` keeps the cursor).
"""

from __future__ import annotations

from sparkmq.errors import StoreError
from sparkmq.store.commitlog import CommitLog


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
