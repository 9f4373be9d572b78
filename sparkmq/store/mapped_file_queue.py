"""MappedFileQueue: the ordered segments of one log (CommitLog, or one ConsumeQueue)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from sparkmq.errors import StoreError
from sparkmq.store.disk import store_io
from sparkmq.store.mapped_file import MappedFile, MapPool, offset_to_file_name
from sparkmq.store.transient_pool import TransientStorePool


class MappedFileQueue:
    """Segments of ``file_bytes`` in ``directory``, each named by its start offset.

    Offsets are global: segment ``k`` covers ``[start, start + file_bytes)``.
    """

    def __init__(
        self,
        directory: Path,
        file_bytes: int,
        sync_by_fd: bool = False,
        pool: MapPool | None = None,
        transient_pool: TransientStorePool | None = None,
    ) -> None:
        self.directory = directory
        self.file_bytes = file_bytes
        self.sync_by_fd = sync_by_fd  # see MappedFile: fdatasync instead of msync (CommitLog)
        self.pool = pool  # see MapPool: mappings of idle segments come and go (ConsumeQueues)
        self.transient_pool = transient_pool  # new segments' write buffers (see MappedFile.commit)
        self.files: list[MappedFile] = []
        self.retired: list[MappedFile] = []  # taken out of ``files``, not yet closed and unlinked

    def load(self) -> None:
        """Open the existing segments in name order; refuse gaps and foreign files."""
        self.directory.mkdir(parents=True, exist_ok=True)
        names = sorted(
            p.name for p in self.directory.iterdir() if p.is_file() and p.name.isdigit() and len(p.name) == 20
        )
        for name in names:
            mapped = MappedFile(self.directory / name, self.file_bytes, self.sync_by_fd, self.pool)
            if self.files and mapped.start_offset != self.files[-1].end_offset:
                mapped.close()
                raise StoreError(f"segment {name} in {self.directory} does not follow {self.files[-1].path.name}")
            self.files.append(mapped)

    @property
    def min_offset(self) -> int:
        """Start of the first live segment (-1 when there is none)."""
        return self.files[0].start_offset if self.files else -1

    @property
    def max_offset(self) -> int:
        """Global offset of the write position (0 when there are no segments)."""
        if not self.files:
            return 0
        last = self.files[-1]
        return last.start_offset + last.write_position

    @property
    def flushed_offset(self) -> int:
        if not self.files:
            return 0
        last = self.files[-1]
        return last.start_offset + last.flushed_position

    def last_file(self, start_offset: int = 0) -> MappedFile:
        """The segment to append to, creating the next one when the last is full.

        ``start_offset`` names the first segment when the queue is empty (a ConsumeQueue
        that begins at a non-zero logical offset).
        """
        if self.files and not self.files[-1].is_full:
            return self.files[-1]
        start = self.files[-1].end_offset if self.files else start_offset - start_offset % self.file_bytes
        if self.transient_pool is not None and not self.transient_pool.available:
            # The commit service is behind: commit the full segments now so the new one gets a buffer
            # too (the log on disk stays a prefix of the appends). The caller holds the store's lock.
            for full in [m for m in self.files if m.buffered]:
                full.commit()
                full.release_buffer()
        mapped = MappedFile(
            self.directory / offset_to_file_name(start),
            self.file_bytes,
            self.sync_by_fd,
            self.pool,
            self.transient_pool,
        )
        mapped.write_position = mapped.flushed_position = 0
        self.files.append(mapped)
        return mapped

    def find(self, offset: int) -> MappedFile | None:
        """The segment holding global ``offset``, or None below the minimum / past the end."""
        if not self.files or offset < self.files[0].start_offset:
            return None
        index = (offset - self.files[0].start_offset) // self.file_bytes
        if index >= len(self.files):
            return None
        return self.files[index]

    @property
    def unflushed_bytes(self) -> int:
        """Bytes committed to the files but not yet flushed, over every segment."""
        return sum(mapped.committed_position - mapped.flushed_position for mapped in list(self.files))

    def commit(self, least_pages: int = 0) -> bool:
        """``MappedFile.commit`` every segment with a write buffer; True when nothing is left
        uncommitted. Buffers of full segments stay lent until ``release_committed``."""
        done = True
        for mapped in [m for m in list(self.files) if m.buffered]:
            mapped.commit(least_pages)
            done = done and mapped.committed_position >= mapped.write_position
        return done

    def release_committed(self) -> int:
        """Give back the write buffers of full, fully committed segments (no reader may hold a
        view of them: the caller holds the store's lock); return how many."""
        return sum(mapped.release_buffer() for mapped in list(self.files) if mapped.buffered)

    def flush(self) -> int:
        """Flush every segment with unflushed bytes; return the flushed global offset.

        The offset comes from the segments this call flushed: an append running meanwhile
        may fill the last one and open the next, and ``flushed_offset`` read afterwards
        would then claim bytes this flush never covered.
        """
        files = list(self.files)
        for mapped in files:
            if mapped.flushed_position < mapped.committed_position:
                mapped.flush()
        if not files:
            return 0
        return files[-1].start_offset + files[-1].flushed_position

    def truncate_dirty(self, offset: int) -> None:
        """Drop everything at and after global ``offset``: later segments go, the containing one is cut.

        The in-memory queue is cut first, so a failing sync while zeroing (a ``DiskError``)
        leaves no segment or position past ``offset`` behind.
        """
        keep: list[MappedFile] = []
        gone: list[MappedFile] = []
        cut: MappedFile | None = None
        for mapped in self.files:
            if mapped.end_offset <= offset:
                keep.append(mapped)
            elif offset >= mapped.start_offset:
                cut = mapped
                keep.append(mapped)
            else:
                gone.append(mapped)
        self.files = keep
        for mapped in reversed(gone):  # newest first: a crash midway leaves no hole that load refuses
            mapped.destroy()
        if cut is not None:
            cut.truncate_to(offset - cut.start_offset)

    def retire_first(self, count: int) -> list[MappedFile]:
        """Take the first ``count`` segments out of the queue; ``destroy_retired`` deletes them.

        Retention retires under the store lock (a list change) and destroys under the flush
        lock only, so it never makes puts and reads wait behind an fsync.
        """
        gone, self.files = self.files[:count], self.files[count:]
        self.retired.extend(gone)
        return gone

    def destroy_retired(self) -> int:
        """Unmap and delete every retired segment; return how many."""
        gone, self.retired = self.retired, []
        for mapped in gone:
            mapped.destroy()
        return len(gone)

    def delete_expired_by_time(self, reserved_seconds: float, force: bool, max_files: int = 10) -> int:
        """Retire old segments from the front, never the newest, stopping at the first young one."""
        now = time.time()
        count = 0
        for mapped in self.files[:-1][:max_files]:
            if not force and mapped.last_modified() + reserved_seconds > now:
                break
            count += 1
        self.retire_first(count)
        return count

    def delete_while(self, predicate: Callable[[MappedFile], bool]) -> int:
        """Retire segments from the front while ``predicate`` holds (never the newest)."""
        count = 0
        for mapped in self.files[:-1]:
            if not predicate(mapped):
                break
            count += 1
        self.retire_first(count)
        return count

    def destroy(self) -> None:
        """Delete every segment and the directory if it ends up empty."""
        self.retire_first(len(self.files))
        self.destroy_retired()
        with store_io(f"removing the empty directory {self.directory}"):
            if self.directory.exists() and not any(self.directory.iterdir()):
                self.directory.rmdir()

    def close(self) -> None:
        for mapped in self.files + self.retired:
            mapped.close()
