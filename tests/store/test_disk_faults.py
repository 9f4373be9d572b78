"""Disk faults on real files: a slow fsync, a failing fsync/msync, a full disk.

Faults are injected through ``sparkmq.store.disk`` (the one seam for fsync, fdatasync, msync
and preallocation); a full disk is a real 8 MiB tmpfs the test mounts. Every test reads back
what was acknowledged.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkmq.errors import DiskError
from sparkmq.store import FlushDiskType, MessageStore, PutMessageStatus, PutResult, disk
from support.disk_faults import StalledSync
from support.processes import wait_until
from support.store_checks import check_consistent, read_queue_all
from support.store_data import make_batch, tiny_config

SYNC = FlushDiskType.SYNC_FLUSH
FLUSH_WAIT_S = 60.0  # a put's fsync on a loaded machine, where syncFlushTimeout's 100 ms is not a fault


def eio(*_args: object) -> None:
    raise OSError(errno.EIO, os.strerror(errno.EIO))


class Acked:
    """Puts numbered batches to queue 0 of ``topic`` and remembers where acknowledged bodies went."""

    def __init__(self, store: MessageStore, topic: str = "T", count: int = 10, body_bytes: int = 100) -> None:
        self.store, self.topic, self.count, self.body_bytes = store, topic, count, body_bytes
        self.next = 0
        self.bodies: dict[int, bytes] = {}  # queue offset -> body of every acknowledged message

    def put(self, flush_wait_s: float | None = None) -> PutResult:
        """``put_messages``; with ``flush_wait_s``, its SYNC flush is awaited that long instead of
        ``syncFlushTimeout`` (a put that must not time out on a loaded machine)."""
        batch = make_batch(self.topic, 0, self.count, start=self.next, body_bytes=self.body_bytes)
        self.next += self.count
        if flush_wait_s is None:
            result = self.store.put_messages(batch)
        else:
            result, flushed = self.store.submit_messages(batch)
            if flushed is not None:
                flushed.result(timeout=flush_wait_s)
        if result.ok:
            self.bodies.update((result.queue_offset + i, body) for i, body in enumerate(batch.bodies))
        return result

    def assert_all_readable(self, store: MessageStore | None = None) -> None:
        stored = {m.queue_offset: bytes(m.body) for m in read_queue_all(store or self.store, self.topic, 0)}
        lost = [offset for offset, body in self.bodies.items() if stored.get(offset) != body]
        assert not lost, f"acknowledged messages lost at queue offsets {lost[:10]}"


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """An 8 MiB tmpfs mounted for the test (root only)."""
    mount_point = tmp_path / "fs"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs to fill (needs root): {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)


def fill(directory: Path, leave_bytes: int) -> Path:
    """A preallocated file taking all free space of ``directory``'s filesystem but ``leave_bytes``."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.posix_fallocate(fd, 0, os.statvfs(directory).f_bavail * os.statvfs(directory).f_frsize - leave_bytes)
    finally:
        os.close(fd)
    return filler


# --- a slow fsync ----------------------------------------------------------------------------


def test_a_waiter_giving_up_on_a_slow_fsync_never_stops_group_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tiny_config(tmp_path / "s", flush_disk_type=SYNC, sync_flush_timeout_ms=100)
    stall = StalledSync()
    with MessageStore(config) as store:
        acked = Acked(store)
        assert acked.put(FLUSH_WAIT_S).ok
        monkeypatch.setattr(disk, "fdatasync", stall)
        _, abandoned = store.submit_messages(make_batch("T", 0, 1, start=1000))
        assert abandoned is not None and stall.entered.wait(10)
        assert abandoned.cancel()  # what asyncio.wait_for did to the shared future on a timeout
        timed_out = acked.put()
        assert timed_out.status is PutMessageStatus.FLUSH_DISK_TIMEOUT
        stall.release.set()  # the disk recovers
        assert acked.put(FLUSH_WAIT_S).ok and acked.put(FLUSH_WAIT_S).ok
        assert store._group_commit is not None and store._group_commit._thread.is_alive()  # noqa: SLF001
        acked.assert_all_readable()


def test_requests_arriving_during_a_flush_all_ride_the_next_single_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tiny_config(tmp_path / "s", flush_disk_type=SYNC)
    stall = StalledSync()
    commitlog_syncs: list[int] = []

    def counted(fd: int) -> None:
        if "commitlog" in os.readlink(f"/proc/self/fd/{fd}"):
            commitlog_syncs.append(fd)
        stall(fd)

    with MessageStore(config) as store:
        acked = Acked(store)
        assert acked.put(FLUSH_WAIT_S).ok
        monkeypatch.setattr(disk, "fdatasync", counted)
        try:
            _, first = store.submit_messages(make_batch("T", 0, 1, start=100))
            assert first is not None and stall.entered.wait(10)
            riders = [store.submit_messages(make_batch("T", 0, 1, start=200 + i))[1] for i in range(3)]
        finally:
            stall.release.set()
        for future in (first, *riders):
            assert future is not None and future.result(FLUSH_WAIT_S) > 0
        assert len(commitlog_syncs) == 2  # the stalled one, then one for the three that came meanwhile


# --- a failing fsync / msync -----------------------------------------------------------------


def test_failed_fsync_turns_the_store_read_only_and_a_restart_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    config = tiny_config(tmp_path / "s", flush_disk_type=SYNC)
    store = MessageStore(config)
    store.start()
    try:
        acked = Acked(store)
        for _ in range(5):
            assert acked.put().ok
        assert store.checkpoint is not None
        checkpoint_before = store.checkpoint.physic_msg_timestamp
        monkeypatch.setattr(disk, "fdatasync", eio)
        with caplog.at_level(logging.CRITICAL, logger="sparkmq.store.message_store"):
            failed = acked.put()
        assert failed.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        assert "Input/output error" in failed.remark and "not flushed" in failed.remark
        assert any("read-only" in r.getMessage() and "Input/output error" in r.getMessage() for r in caplog.records)
        monkeypatch.undo()  # fsync "works" again: Linux marked the failed pages clean, so the store must stay stopped
        refused = acked.put()
        assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        assert "read-only" in refused.remark and "Input/output error" in refused.remark
        with pytest.raises(DiskError):
            store.flush()
        assert store.checkpoint.physic_msg_timestamp == checkpoint_before
        acked.assert_all_readable()  # reads keep working
    finally:
        store.close()
    assert config.abort_path.exists()  # the next start must not trust the checkpoint
    again = MessageStore(config)
    assert again.start().last_exit_ok is False  # abnormal recovery, from the CommitLog
    try:
        acked.assert_all_readable(again)
        check_consistent(again)
        acked.store = again
        assert acked.put().ok
        acked.assert_all_readable(again)
    finally:
        again.close()


def test_failed_msync_also_stops_writes_and_a_broken_disk_does_not_stop_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tiny_config(tmp_path / "s")
    with MessageStore(config) as store:
        acked = Acked(store)
        assert acked.put().ok
        monkeypatch.setattr(disk, "msync", eio)  # ConsumeQueue, IndexFile and checkpoint syncs, until the end
        with pytest.raises(DiskError):
            store.flush()
        refused = acked.put()
        assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and "read-only" in refused.remark
        acked.assert_all_readable()
    assert config.abort_path.exists()
    monkeypatch.undo()
    with MessageStore(config) as again:
        acked.assert_all_readable(again)
        check_consistent(again)


def test_a_failed_msync_of_a_finished_index_file_undoes_the_put(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tiny_config(tmp_path / "s", flush_disk_type=SYNC)
    with MessageStore(config) as store:
        acked = Acked(store)
        assert acked.put().ok
        monkeypatch.setattr(disk, "msync", eio)
        while (result := acked.put()).ok:  # until an IndexFile fills and is synced on its roll
            pass
        assert result.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and "Input/output error" in result.remark
        assert store.disk_error is not None
        acked.assert_all_readable()
        monkeypatch.undo()
    with MessageStore(config) as again:
        acked.assert_all_readable(again)
        check_consistent(again)


# --- a full disk -----------------------------------------------------------------------------


def test_full_disk_fails_segment_allocation_cleanly_and_writes_resume(small_fs: Path) -> None:
    config = tiny_config(small_fs / "store", commitlog_file_bytes=1 << 20, flush_disk_type=SYNC)
    with MessageStore(config) as store:
        acked = Acked(store, count=7, body_bytes=900)
        assert acked.put().ok
        filler = fill(small_fs, 512 * 1024)  # room for ConsumeQueue and index files, not a CommitLog segment
        for _ in range(200):
            result = acked.put()
            if not result.ok:
                break
        assert result.status is PutMessageStatus.CREATE_MAPEDFILE_FAILED
        assert result.remark.startswith("create mapped file failed") and "No space left on device" in result.remark
        assert not list(config.commitlog_dir.glob("*.tmp"))
        assert acked.put().status is PutMessageStatus.CREATE_MAPEDFILE_FAILED  # again, and still cleanly
        acked.assert_all_readable()
        filler.unlink()
        assert acked.put().ok and acked.put().ok  # the half-written batch left no trace behind
        assert len(store.commitlog.queue.files) == 2
        acked.assert_all_readable()
    with MessageStore(config) as again:
        acked.assert_all_readable(again)
        check_consistent(again)


@pytest.mark.parametrize("failing_dir", ["consumequeue", "index"])
def test_a_derived_file_that_cannot_be_allocated_undoes_the_put(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing_dir: str
) -> None:
    config = tiny_config(tmp_path / "s", flush_disk_type=SYNC)
    real = disk.fallocate

    def enospc_in_dir(fd: int, offset: int, size: int) -> None:
        if f"/{failing_dir}/" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd, offset, size)

    with MessageStore(config) as store:
        acked = Acked(store, count=15)
        assert acked.put().ok
        monkeypatch.setattr(disk, "fallocate", enospc_in_dir)
        for _ in range(50):
            result = acked.put()
            if not result.ok:
                break
        assert result.status is PutMessageStatus.CREATE_MAPEDFILE_FAILED and failing_dir in result.remark
        monkeypatch.undo()
        assert acked.put().ok
        acked.assert_all_readable()
        check_consistent(store)
    with MessageStore(config) as again:
        acked.assert_all_readable(again)
        check_consistent(again)


def test_above_the_warning_ratio_writes_are_refused_until_space_returns(small_fs: Path) -> None:
    config = tiny_config(
        small_fs / "store",
        commitlog_file_bytes=64 * 1024,
        disk_max_used_space_ratio=0.3,
        disk_space_clean_forcibly_ratio=0.4,
        disk_space_warning_level_ratio=0.5,
        clean_file_forcibly_enable=False,
        clean_resource_interval_ms=20,
    )
    with MessageStore(config) as store:
        acked = Acked(store)
        assert acked.put().ok
        filler = fill(small_fs, 2 * 1024 * 1024)  # 75 % used
        assert wait_until(lambda: store.retention.write_refusal is not None)
        refused = acked.put()
        assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and "disk is full" in refused.remark
        acked.assert_all_readable()
        filler.unlink()
        assert wait_until(lambda: store.retention.write_refusal is None)  # the periodic check, no restart
        assert acked.put().ok
        acked.assert_all_readable()


# --- new segments are durable ----------------------------------------------------------------


def test_a_new_segment_and_its_directory_entry_are_fsynced_before_the_put_is_acknowledged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real = disk.fsync
    monkeypatch.setattr(disk, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real(fd))[1])
    config = tiny_config(tmp_path / "s", flush_disk_type=SYNC)
    with MessageStore(config) as store:
        acked = Acked(store)
        while len(store.commitlog.queue.files) < 2:
            synced.clear()
            assert acked.put().ok
        segment = store.commitlog.queue.files[1].path
        file_sync = synced.index(f"{segment}.tmp")  # fsynced under its temporary name, then renamed
        assert synced.index(str(segment.parent), file_sync) > file_sync
        acked.assert_all_readable()


def test_a_flush_failing_at_close_still_closes_and_leaves_recovery_to_the_next_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tiny_config(tmp_path / "s")  # ASYNC: acknowledged at once, flushed at close
    with MessageStore(config) as store:
        acked = Acked(store)
        for _ in range(3):
            assert acked.put().ok
        monkeypatch.setattr(disk, "fdatasync", eio)
    assert store.disk_error is not None and "Input/output error" in store.disk_error
    assert config.abort_path.exists()
    monkeypatch.undo()
    again = MessageStore(config)
    assert again.start().last_exit_ok is False
    try:
        acked.assert_all_readable(again)
        check_consistent(again)
    finally:
        again.close()


@pytest.mark.parametrize(("start", "size"), [(0, None), (5000, 70_000), (4096, 1)])
def test_msync_through_libc_syncs_a_range_or_the_whole_mapping(tmp_path: Path, start: int, size: int | None) -> None:
    """disk.msync (libc's msync by ctypes, which releases the GIL) accepts what mmap.flush accepts:
    an unaligned start is rounded down to its page, and the bytes are in the file."""
    path = tmp_path / "mapped"
    path.write_bytes(bytes(1 << 17))
    with path.open("r+b") as file, mmap.mmap(file.fileno(), 1 << 17) as mapping:
        mapping[:] = b"x" * (1 << 17)
        disk.msync(mapping, start, size)
        assert os.pread(file.fileno(), 16, start) == b"x" * 16
