"""MappedFile: one fixed-size segment file, memory-mapped, named by its 20-digit start offset."""

from __future__ import annotations

import heapq
import itertools
import mmap
import os
import sys
import threading
from operator import attrgetter
from pathlib import Path

import numpy as np

from sparkmq.errors import ConfigError, DiskError, SegmentAllocationError, StoreError
from sparkmq.store import disk
from sparkmq.store.transient_pool import TransientStorePool

PAGE_BYTES = mmap.PAGESIZE
# On Linux, msync(MS_SYNC) is vfs_fsync_range(datasync=1) on the file: fdatasync on a
# descriptor of the same file writes the same pages (those dirtied through a MAP_SHARED
# mapping included) and, unlike CPython's mmap.flush, releases the GIL while it waits.
_FDATASYNC = sys.platform.startswith("linux")
_ZERO_SCAN_CHUNK = 4 * 1024 * 1024


def offset_to_file_name(offset: int) -> str:
    """``UtilAll.offset2FileName``: the start offset zero-padded to 20 digits.

    >>> offset_to_file_name(1073741824)
    '00000000001073741824'
    """
    return f"{offset:020d}"


def create_full_size(path: Path, file_bytes: int, head: bytes = b"") -> int:
    """Create ``path`` with ``file_bytes`` preallocated bytes (beginning with ``head``); return an open fd.

    The file is preallocated (a full disk fails here with ENOSPC instead of a SIGBUS on a
    later write through the mapping), fsynced, renamed into place, and its directory is
    fsynced: a record acknowledged in the new segment cannot vanish with its directory
    entry on power loss, and a crash never leaves a short file that a start would refuse.
    Raises :class:`SegmentAllocationError` naming the file and the OS error.
    """
    tmp = path.with_name(path.name + ".tmp")
    try:
        disk.make_directories(path.parent)
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    except OSError as exc:
        raise SegmentAllocationError(f"cannot create segment {path}: {exc}") from exc
    try:
        disk.preallocate(fd, file_bytes)
        if head:
            os.pwrite(fd, head, 0)
        disk.fsync(fd)
        os.rename(tmp, path)
        disk.fsync_directory(path.parent)
    except OSError as exc:
        os.close(fd)
        tmp.unlink(missing_ok=True)  # give back whatever part of the space was reserved
        raise SegmentAllocationError(f"cannot create segment {path}: {exc}") from exc
    return fd


class MapPool:
    """At most ``max_mapped`` segments of a pool mapped at once, least recently used unmapped first.

    Each mapping holds a file descriptor (CPython's ``mmap`` keeps a dup of it until closed), so
    thousands of ConsumeQueue files would exhaust the process's descriptors; pooled segments are
    unmapped when idle and mapped again on their next use. Every use of a pooled segment's mapping
    happens under the store's lock, as does every eviction; the flush thread, which does not hold
    it, guards its sync with the segment's own lock, which eviction only tries.
    """

    def __init__(self, max_mapped: int) -> None:
        if max_mapped < 1:
            raise ConfigError(f"max_mapped must be at least 1, not {max_mapped}")
        self.max_mapped = max_mapped
        self._used: set[MappedFile] = set()  # the mapped segments; each one's ``tick`` is its last use
        self._clock = itertools.count(1).__next__
        self._lock = threading.Lock()

    def touch(self, used: MappedFile) -> None:
        """``used`` is mapped and in use now: remember that, and unmap the idlest beyond the cap.

        A segment already mapped costs one store into its ``tick`` (a group put touches every
        queue it writes, ~130 at 1,000 queues); the least recently used are found only when one
        is mapped again over the cap, and a few more than needed go then, so a scan is not paid per map.
        """
        used.tick = self._clock()
        pooled = self._used
        if used in pooled:
            return
        with self._lock:
            pooled.add(used)
            excess = len(pooled) - self.max_mapped
            if excess <= 0:
                return
            excess += self.max_mapped // 16
            idlest = heapq.nsmallest(excess, (m for m in pooled if m is not used), key=attrgetter("tick"))
        for victim in idlest:
            if victim.try_unmap():
                self.forget(victim)

    def forget(self, segment: MappedFile) -> None:
        with self._lock:
            self._used.discard(segment)

    @property
    def mapped(self) -> int:
        """Segments of the pool mapped now (at most ``max_mapped``, plus those a sync kept)."""
        return len(self._used)


class MappedFile:
    """A segment of ``file_bytes`` mapped into memory; appends go to ``write_position``.

    With ``sync_by_fd`` (CommitLog segments), ``flush`` calls ``os.fdatasync`` on a
    descriptor opened at the first flush and closed once the whole segment is flushed, so
    other threads keep running during the disk wait; otherwise it calls ``mmap.flush``.
    With a ``pool`` the mapping comes and goes (see :class:`MapPool`); a flush of a segment
    that is not mapped right now syncs through a descriptor opened for that flush.

    A new segment given a ``transient_pool`` with a free buffer appends into that buffer;
    ``commit`` writes the appended bytes into the file, ``flush`` syncs only committed bytes,
    and reads see the buffer (every byte appended) until the full segment's last commit gives
    it back (see :mod:`sparkmq.store.transient_pool`).

    Example::

        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as directory:
        ...     segment = MappedFile(Path(directory) / "00000000000000000000", 1024)
        ...     (segment.append(b"abc"), segment.append(b"de"), segment.read(0, 5))
        ...     segment.close()
        (0, 3, b'abcde')
    """

    def __init__(
        self,
        path: Path,
        file_bytes: int,
        sync_by_fd: bool = False,
        pool: MapPool | None = None,
        transient_pool: TransientStorePool | None = None,
    ) -> None:
        self.path = path
        self._sync_by_fd = sync_by_fd and _FDATASYNC
        self._fd: int | None = None
        self._pool = pool
        self._io = threading.Lock()  # a sync in progress vs. an eviction of the mapping
        self._mmap: mmap.mmap | None = None
        self._closed = False
        self.tick = 0  # MapPool: the last use
        self.file_bytes = file_bytes
        self.start_offset = int(path.name)
        exists = path.exists()
        if exists:
            try:
                fd = os.open(path, os.O_RDWR)
            except OSError as exc:
                raise StoreError(f"cannot open segment {path}: {exc}") from exc
        else:
            fd = create_full_size(path, file_bytes)
        try:
            size = os.fstat(fd).st_size
            if size != file_bytes:
                raise StoreError(f"segment {path} has {size} bytes, not the configured {file_bytes}")
            self._mmap = self._map_fd(fd)
        finally:
            os.close(fd)
        if pool is not None:
            pool.touch(self)
        self.write_position = 0 if not exists else file_bytes
        self.flushed_position = self.write_position
        self._committed = self.write_position
        self._transient_pool = transient_pool
        self._buffer = None if exists or transient_pool is None else transient_pool.borrow()

    def _map_fd(self, fd: int) -> mmap.mmap:
        try:
            return mmap.mmap(fd, self.file_bytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError as exc:
            raise StoreError(f"cannot map segment {self.path}: {exc}") from exc

    def _mapped(self) -> mmap.mmap:
        """The mapping, made again if the pool unmapped it (callers hold the store's lock)."""
        mapping = self._mmap
        if mapping is None:
            if self._closed:
                raise StoreError(f"segment {self.path} is closed")
            try:
                fd = os.open(self.path, os.O_RDWR)
            except OSError as exc:
                raise StoreError(f"cannot open segment {self.path}: {exc}") from exc
            try:
                mapping = self._mmap = self._map_fd(fd)
            finally:
                os.close(fd)
        if self._pool is not None:
            self._pool.touch(self)
        return mapping

    def try_unmap(self) -> bool:
        """Unmap unless a sync is running or a view is held (then keep it); True once unmapped.

        Bytes written through the mapping stay in the page cache: a later flush syncs them
        through a descriptor (``fdatasync`` covers every dirty page of the file).
        """
        if not self._io.acquire(blocking=False):
            return False
        try:
            mapping = self._mmap
            if mapping is not None:
                self._mmap = None
                try:
                    mapping.close()
                except BufferError:
                    self._mmap = mapping
                    return False
            return True
        finally:
            self._io.release()

    @property
    def committed_position(self) -> int:
        """Bytes in the file itself: all appended ones unless a write buffer holds some."""
        return self._committed if self._buffer is not None else self.write_position

    @property
    def buffered(self) -> bool:
        """Whether appends go to a write buffer (see ``commit``)."""
        return self._buffer is not None

    def commit(self, least_pages: int = 0) -> bool:
        """Write the buffer's uncommitted bytes into the file (``pwrite``); True if any were.

        With ``least_pages``, only once that many pages wait (or the segment is full): Java's
        ``commitCommitLogLeastPages``. The committed bytes are the file's, in the page cache (a
        process kill keeps them); ``flush`` makes them durable. Raises :class:`DiskError`.
        """
        try:
            with self._io:  # one commit of a segment at a time (the commit service, a roll of the log)
                buffer, committed, target = self._buffer, self._committed, self.write_position
                if buffer is None or target <= committed:
                    return False
                waiting = target // PAGE_BYTES - committed // PAGE_BYTES
                if least_pages > 0 and target < self.file_bytes and waiting < least_pages:
                    return False
                if self._fd is None:
                    self._fd = os.open(self.path, os.O_RDWR)
                with memoryview(buffer) as whole:
                    done = committed
                    while done < target:
                        done += os.pwrite(self._fd, whole[done:target], done)
                self._committed = target
        except OSError as exc:
            raise DiskError(f"commit of {self.path} failed: {exc}") from exc
        return True

    def release_buffer(self) -> bool:
        """Give a fully committed segment's buffer back to its pool (no view of it may be held);
        True if one was given back. Reads go through the mapping from then on."""
        buffer = self._buffer
        if buffer is None or self._committed < self.file_bytes or self._transient_pool is None:
            return False
        self._buffer = None
        self._transient_pool.give_back(buffer)
        return True

    def _readable(self) -> mmap.mmap:
        """What reads see: the write buffer while there is one, else the mapping."""
        buffer = self._buffer
        return buffer if buffer is not None else self._mapped()

    @property
    def end_offset(self) -> int:
        return self.start_offset + self.file_bytes

    @property
    def remaining(self) -> int:
        return self.file_bytes - self.write_position

    @property
    def is_full(self) -> bool:
        return self.write_position >= self.file_bytes

    def append(self, data: bytes | memoryview) -> int:
        """Copy ``data`` at the write position; return the position it went to."""
        pos = self.write_position
        end = pos + len(data)
        if end > self.file_bytes:
            raise StoreError(f"append of {len(data)} bytes overflows segment {self.path.name} at {pos}")
        mapping = self._buffer if self._buffer is not None else self._mmap
        if mapping is None:
            mapping = self._mapped()
        elif self._pool is not None:  # _mapped's work for a mapped segment, one call less per append
            self._pool.touch(self)
        mapping[pos:end] = data
        self.write_position = end
        return pos

    def rewrite(self, pos: int, data: bytes) -> None:
        """Overwrite ``data`` at ``pos`` (below the write position: a repair) and sync it now."""
        if pos < 0 or pos + len(data) > self.write_position:
            raise StoreError(f"rewrite of {len(data)} bytes at {pos} outside {self.path.name}'s written bytes")
        if self._buffer is not None:
            self._buffer[pos : pos + len(data)] = data
        mapping = self._mapped()
        mapping[pos : pos + len(data)] = data
        start = pos - pos % PAGE_BYTES
        try:
            with self._io:
                disk.msync(mapping, start, pos + len(data) - start)
        except OSError as exc:
            raise DiskError(f"flush of {self.path} failed: {exc}") from exc

    def mark_full(self) -> None:
        """Treat the rest of the file as used (after an END_OF_FILE filler)."""
        self.write_position = self.file_bytes

    def read(self, pos: int, size: int) -> bytes:
        """A copy of ``size`` bytes at ``pos`` (within this file)."""
        return self._readable()[pos : pos + size]

    def read_spans(self, starts: list[int], stops: list[int]) -> bytes:
        """The bytes of every ``[start, stop)`` (within this file), back to back, in one copy each."""
        mapping = self._readable()
        return b"".join([mapping[start:stop] for start, stop in zip(starts, stops, strict=True)])

    def find(self, sub: bytes, start: int, end: int) -> int:
        """The lowest position of ``sub`` within [start, end), -1 if none (no copy: ``mmap.find``)."""
        return self._readable().find(sub, start, end)

    def view(self) -> memoryview:
        """A view of the whole mapping; release it (``with``) before closing the file."""
        return memoryview(self._readable())

    def flush(self) -> int:
        """Make ``[flushed, committed)`` durable (msync or fdatasync); return the new flushed position.

        Bytes below the committed position read here were copied in before it moved, so the
        sync covers them even while appends go on in another thread. A failed sync raises
        :class:`DiskError` and leaves the flushed position where it was.
        """
        target = self.committed_position
        if target > self.flushed_position:
            try:
                with self._io:
                    if self._sync_by_fd or self._fd is not None:
                        if self._fd is None:
                            self._fd = os.open(self.path, os.O_RDWR)
                        disk.fdatasync(self._fd)
                    elif self._mmap is None:  # unmapped by the pool since it was written
                        fd = os.open(self.path, os.O_RDWR)
                        try:
                            disk.fdatasync(fd)
                        finally:
                            os.close(fd)
                    else:
                        start = self.flushed_position - self.flushed_position % PAGE_BYTES
                        disk.msync(self._mmap, start, target - start)
            except OSError as exc:
                raise DiskError(f"flush of {self.path} failed: {exc}") from exc
            self.flushed_position = target
            if target >= self.file_bytes:
                self._close_fd()
        return self.flushed_position

    def _close_fd(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def truncate_to(self, pos: int) -> None:
        """Set the write position to ``pos`` and zero the written bytes after it.

        Zeroing keeps a later, shorter append from leaving an old valid record behind the new
        end; only chunks holding data are written. The positions move first: a failing sync
        (:class:`DiskError`) still leaves nothing past ``pos`` readable.
        """
        written = self.write_position
        self.write_position = self.flushed_position = pos
        if self._buffer is not None:
            self._buffer[pos:written] = bytes(max(written - pos, 0))
            self._committed = min(self._committed, pos)
        end = self._last_nonzero_chunk_end(pos)
        if end > pos:
            mapping = self._mapped()
            mapping[pos:end] = bytes(end - pos)
            try:
                disk.msync(mapping)
            except OSError as exc:
                raise DiskError(f"flush of {self.path} after truncating it at {pos} failed: {exc}") from exc

    def _last_nonzero_chunk_end(self, pos: int) -> int:
        with memoryview(self._mapped()) as whole:
            data = np.frombuffer(whole, dtype=np.uint8)
            end = pos
            for chunk in range(pos, self.file_bytes, _ZERO_SCAN_CHUNK):
                stop = min(chunk + _ZERO_SCAN_CHUNK, self.file_bytes)
                if data[chunk:stop].any():
                    end = stop
            del data
        return end

    def last_modified(self) -> float:
        return self.path.stat().st_mtime

    def close(self) -> None:
        """Unmap; raises BufferError if a view is still held. An uncommitted buffer's bytes are dropped."""
        self._close_fd()
        buffer, self._buffer = self._buffer, None
        if buffer is not None and self._transient_pool is not None:
            self._transient_pool.give_back(buffer)
        if self._pool is not None:
            self._pool.forget(self)
        mapping = self._mmap
        if mapping is not None and not mapping.closed:
            self._mmap = None
            try:
                mapping.close()
            except BufferError:
                self._mmap = mapping
                raise
        self._closed = True

    def destroy(self) -> None:
        """Unmap and delete the file."""
        self.close()
        self.path.unlink(missing_ok=True)
