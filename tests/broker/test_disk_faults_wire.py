"""What a client sees over a real socket when the broker's disk stalls, fails or fills.

An in-process broker (SYNC flush) on a loopback port; faults are injected through
``sparkmq.store.disk``. Every acknowledged message is pulled back at the end.
"""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest

from sparkmq.protocol import ResponseCode
from sparkmq.store import disk
from sparkmq.store.config import FlushDiskType
from support.broker_wire import Wire, run_broker

SYNC = dict(flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout=200)
TOPIC = "DiskFaults"


class Sent:
    """Bodies the broker acknowledged (SUCCESS), by queue offset."""

    def __init__(self) -> None:
        self.acked: dict[int, bytes] = {}
        self.count = 0

    async def send(self, w: Wire, body_bytes: int = 0) -> tuple[int, str]:
        body = f"message-{self.count}".encode().ljust(body_bytes, b".")
        self.count += 1
        response = await w.send(TOPIC, body, queue_id=0)
        if response.code == ResponseCode.SUCCESS:
            self.acked[int(response.ext_fields["queueOffset"])] = body
        return response.code, response.remark or ""

    async def assert_all_pulled(self, w: Wire) -> None:
        stored = {r.queue_offset: bytes(r.body) for r in await w.pull_records("checker", TOPIC, 0, max_nums=1000)}
        lost = [offset for offset, body in self.acked.items() if stored.get(offset) != body]
        assert not lost, f"acknowledged messages lost at queue offsets {lost}"


def test_a_send_past_sync_flush_timeout_gets_flush_disk_timeout_and_the_next_succeeds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    entered, release = threading.Event(), threading.Event()
    real = disk.fdatasync

    def stalled(fd: int) -> None:
        if not release.is_set():
            entered.set()
            release.wait()
        real(fd)

    sent = Sent()

    async def scenario(w: Wire) -> None:
        assert (await sent.send(w))[0] == ResponseCode.SUCCESS
        monkeypatch.setattr(disk, "fdatasync", stalled)
        code, _ = await sent.send(w)
        assert entered.is_set() and code == ResponseCode.FLUSH_DISK_TIMEOUT
        release.set()  # the disk recovers
        for _ in range(3):
            assert (await sent.send(w))[0] == ResponseCode.SUCCESS
        await sent.assert_all_pulled(w)

    try:
        run_broker(tmp_path / "store", scenario, **SYNC)
    finally:
        release.set()


def test_a_failed_fsync_answers_service_not_available_and_a_restart_recovers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def eio(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    sent = Sent()

    async def failing(w: Wire) -> None:
        for _ in range(3):
            assert (await sent.send(w))[0] == ResponseCode.SUCCESS
        monkeypatch.setattr(disk, "fdatasync", eio)
        code, remark = await sent.send(w)
        assert code == ResponseCode.SERVICE_NOT_AVAILABLE and "Input/output error" in remark, remark
        monkeypatch.undo()  # a later fsync would "succeed": the broker must not believe it
        code, remark = await sent.send(w)
        assert code == ResponseCode.SERVICE_NOT_AVAILABLE and "read-only" in remark and "Input/output error" in remark
        await sent.assert_all_pulled(w)  # reads keep working

    async def restarted(w: Wire) -> None:
        await sent.assert_all_pulled(w)
        assert (await sent.send(w))[0] == ResponseCode.SUCCESS
        await sent.assert_all_pulled(w)

    run_broker(tmp_path / "store", failing, **SYNC)
    assert (tmp_path / "store" / "abort").exists()
    run_broker(tmp_path / "store", restarted, **SYNC)


def test_a_segment_that_cannot_be_allocated_answers_system_error(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    real = disk.fallocate

    def no_space_for_commitlog(fd: int, offset: int, size: int) -> None:
        if "/commitlog/" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd, offset, size)

    sent = Sent()

    async def scenario(w: Wire) -> None:
        assert (await sent.send(w))[0] == ResponseCode.SUCCESS
        monkeypatch.setattr(disk, "fallocate", no_space_for_commitlog)
        for _ in range(8):  # 300 KB records: the fourth needs a second 1 MiB segment
            code, remark = await sent.send(w, body_bytes=300_000)
            if code != ResponseCode.SUCCESS:
                break
        assert code == ResponseCode.SYSTEM_ERROR and remark.startswith("create mapped file failed"), remark
        assert "No space left on device" in remark
        monkeypatch.undo()  # space returns
        assert (await sent.send(w, body_bytes=300_000))[0] == ResponseCode.SUCCESS
        await sent.assert_all_pulled(w)

    run_broker(tmp_path / "store", scenario, **SYNC)
