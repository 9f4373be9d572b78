"""Store outcomes as values (RocketMQ's PutMessageStatus / GetMessageStatus) and result records."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from sparkmq.message.msgid import offset_msg_id
from sparkmq.message.record import Host


class PutMessageStatus(enum.Enum):
    """How a put ended; the broker maps each to a wire response code."""

    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"  # SYNC_MASTER: stored here, no slave confirmed in time
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"  # SYNC_MASTER: stored here, no slave connected or close enough
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPEDFILE_FAILED = "CREATE_MAPEDFILE_FAILED"
    OS_PAGECACHE_BUSY = "OS_PAGECACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"
    IN_SYNC_REPLICAS_NOT_ENOUGH = "IN_SYNC_REPLICAS_NOT_ENOUGH"  # controller mode: SyncStateSet < minInSyncReplicas


class GetMessageStatus(enum.Enum):
    """How a read ended (``GetMessageStatus``)."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass(frozen=True, slots=True)
class PutResult:
    """The outcome of a put: status, and for PUT_OK where the records went.

    ``physical_offsets`` and ``queue_offsets`` hold one entry per message.
    """

    status: PutMessageStatus
    remark: str = ""
    physical_offsets: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    sizes: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    queue_offset: int = -1
    store_timestamp: int = 0
    store_host: Host | None = None

    @property
    def ok(self) -> bool:
        return self.status is PutMessageStatus.PUT_OK

    @property
    def wrote_offset(self) -> int:
        """Physical offset of the first record (``AppendMessageResult.wroteOffset``)."""
        return int(self.physical_offsets[0]) if len(self.physical_offsets) else -1

    def msg_ids(self) -> list[str]:
        """The offset msgId of every stored record."""
        if self.store_host is None:
            return []
        host = self.store_host
        return [offset_msg_id(host.ip, host.port, int(p)) for p in self.physical_offsets]


@dataclass(frozen=True, slots=True)
class GetResult:
    """The outcome of a read: the records as contiguous buffers, plus offsets.

    ``buffers`` hold whole stored records back to back (one buffer per CommitLog segment
    read); ``queue_offsets`` / ``physical_offsets`` / ``sizes`` list the records in
    order. ``next_begin_offset`` is where the next read should start.
    """

    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    buffers: list[bytes] = field(default_factory=list)
    queue_offsets: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    physical_offsets: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    sizes: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @property
    def message_count(self) -> int:
        return len(self.sizes)

    def body(self) -> bytes:
        """All records as one buffer (a PULL response body)."""
        return self.buffers[0] if len(self.buffers) == 1 else b"".join(self.buffers)
