"""StoreCheckpoint: three timestamps in a 4 KiB file that bound what recovery must re-check."""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

from sparkmq.errors import StoreError
from sparkmq.store import disk

CHECKPOINT_BYTES = 4096  # one OS page, as RocketMQ maps it
_FIELDS = struct.Struct(">qqq")
_SAFETY_MARGIN_MS = 3000  # StoreCheckpoint.getMinTimestamp subtracts 3 s


class StoreCheckpoint:
    """``physicMsgTimestamp``, ``logicsMsgTimestamp``, ``indexMsgTimestamp`` at bytes 0, 8, 16."""

    physic_msg_timestamp: int
    logics_msg_timestamp: int
    index_msg_timestamp: int

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                if os.fstat(fd).st_size < CHECKPOINT_BYTES:
                    disk.preallocate(fd, CHECKPOINT_BYTES)  # a sparse page would SIGBUS on a full disk
                self._mmap = mmap.mmap(fd, CHECKPOINT_BYTES)
            finally:
                os.close(fd)
        except OSError as exc:
            raise StoreError(f"cannot open checkpoint {path}: {exc}") from exc
        self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp = _FIELDS.unpack_from(
            self._mmap, 0
        )

    def min_timestamp(self) -> int:
        """``getMinTimestamp``: the older of physic/logics, less 3 s, never negative."""
        return max(min(self.physic_msg_timestamp, self.logics_msg_timestamp) - _SAFETY_MARGIN_MS, 0)

    def flush(self) -> None:
        """Write the three fields and msync the page."""
        _FIELDS.pack_into(self._mmap, 0, self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp)
        disk.msync(self._mmap)

    def close(self) -> None:
        if not self._mmap.closed:
            self.flush()
            self._mmap.close()
