"""TransientStorePool: CommitLog-segment-sized write buffers outside the file mappings.

With ``transientStorePoolEnable`` a new CommitLog segment borrows one: appends are copied into
it, and the commit service writes the appended ranges into the file (``pwrite``) for the flush
to sync (RocketMQ's ``TransientStorePool``, ``MappedFile.commit``). A full segment gives its
buffer back once committed, its pages dropped: unlike Java's, the buffers are not locked in
memory and hold only what the segments being written hold. When none is free for a new segment,
the full ones are committed first (see ``MappedFileQueue.last_file``).
"""

from __future__ import annotations

import mmap
import threading

from sparkmq.errors import ConfigError


class TransientStorePool:
    """``size`` anonymous mappings of ``buffer_bytes`` each, lent to segments one at a time.

    >>> pool = TransientStorePool(2, 4096)
    >>> first = pool.borrow(); pool.available
    1
    >>> pool.give_back(first); pool.available
    2
    """

    def __init__(self, size: int, buffer_bytes: int) -> None:
        if size < 1:
            raise ConfigError(f"transientStorePoolSize must be at least 1, not {size}")
        self.buffer_bytes = buffer_bytes
        self._free = [mmap.mmap(-1, buffer_bytes, flags=mmap.MAP_PRIVATE) for _ in range(size)]
        self._lock = threading.Lock()

    @property
    def available(self) -> int:
        """Buffers not lent now."""
        return len(self._free)

    def borrow(self) -> mmap.mmap | None:
        """A free buffer, or None when every one is lent."""
        with self._lock:
            return self._free.pop() if self._free else None

    def give_back(self, buffer: mmap.mmap) -> None:
        """Take ``buffer`` back, its pages dropped: it reads as zeros again (a new segment's bytes past
        its write position are zeros, as a new file's are) and holds no memory until written."""
        buffer.madvise(mmap.MADV_DONTNEED)
        with self._lock:
            self._free.append(buffer)

    def close(self) -> None:
        with self._lock:
            for buffer in self._free:
                buffer.close()
            self._free.clear()
