"""HA wire format of RocketMQ 4.x (``HAConnection`` / ``HAService.HAClient``), big-endian:

* slave → master: its CommitLog max offset, 8 bytes, at start, after each receipt and every
  ``haSendHeartbeatInterval``;
* controller mode only, slave → master first: ``HANDSHAKE_MARK`` (8 bytes, a negative "offset" no
  4.x slave sends) and the slave's brokerId (8 bytes), so the master knows whose acks keep whom
  in the SyncStateSet (RocketMQ 5's AutoSwitchHAConnection handshake carries the same id);
* master → slave: ``phyOffset`` (8 bytes) + ``bodySize`` (4 bytes), then ``bodySize`` bytes of
  the CommitLog from ``phyOffset``. ``bodySize`` 0 is a heartbeat.

>>> decode_transfer_header(encode_transfer_header(4096, 10))
(4096, 10)
>>> REPORT.unpack(encode_report(123))[0]
123
"""

from __future__ import annotations

import struct

from sparkmq.errors import ProtocolError

REPORT = struct.Struct(">q")
HANDSHAKE_MARK = -0x5350524B  # "SPRK"
HANDSHAKE = struct.Struct(">qq")
TRANSFER_HEADER = struct.Struct(">qi")
# A transfer body is at most haTransferBatchSize (32 KiB by default); bound what a peer may announce.
MAX_TRANSFER_BODY_BYTES = 64 * 1024 * 1024


def encode_report(max_offset: int) -> bytes:
    """The slave's report of its CommitLog max offset."""
    return REPORT.pack(max_offset)


def encode_handshake(broker_id: int) -> bytes:
    """A controller-mode slave's first bytes on the link."""
    return HANDSHAKE.pack(HANDSHAKE_MARK, broker_id)


def encode_transfer_header(offset: int, size: int) -> bytes:
    """The header in front of ``size`` CommitLog bytes starting at ``offset``."""
    return TRANSFER_HEADER.pack(offset, size)


def decode_transfer_header(data: bytes | memoryview) -> tuple[int, int]:
    """(offset, size) of a transfer header; :class:`ProtocolError` for impossible values."""
    offset, size = TRANSFER_HEADER.unpack(data)
    if offset < 0 or not 0 <= size <= MAX_TRANSFER_BODY_BYTES:
        raise ProtocolError(f"HA transfer header with offset {offset} and size {size} is not valid")
    return offset, size
