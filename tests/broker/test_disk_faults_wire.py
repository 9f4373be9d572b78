"""What a client sees over a real socket when the broker's disk stalls, fails or fills; the disk keys of broker.conf.

An in-process broker (SYNC flush) on a loopback port; faults are injected through
``sparkmq.store.disk``. Every acknowledged message is pulled back at the end.
"""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from sparkmq.broker.config import BrokerConfig
from sparkmq.errors import ConfigError
from sparkmq.protocol import ResponseCode
from sparkmq.store import disk
from sparkmq.store.config import FlushDiskType
from support.broker_wire import Wire, run_broker
from support.disk_faults import NoSpaceForCommitLog, StalledSync

SYNC = dict(flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout=200)
# Tests of faults other than a slow fsync: a loaded machine's fsync must not answer FLUSH_DISK_TIMEOUT
# (the broker still answers within the client's own timeout, broker_wire.TIMEOUT_S).
SYNC_PATIENT = dict(flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout=4_000)
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
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stall = StalledSync()
    sent = Sent()

    async def scenario(w: Wire) -> None:
        assert (await sent.send(w))[0] == ResponseCode.SUCCESS
        monkeypatch.setattr(disk, "fdatasync", stall)
        code, _ = await sent.send(w)
        assert stall.entered.is_set() and code == ResponseCode.FLUSH_DISK_TIMEOUT
        stall.release.set()  # the disk recovers
        for _ in range(3):
            assert (await sent.send(w))[0] == ResponseCode.SUCCESS
        await sent.assert_all_pulled(w)

    try:
        run_broker(tmp_path / "store", scenario, **SYNC)
    finally:
        stall.release.set()


def test_a_failed_fsync_answers_service_not_available_and_a_restart_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
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


def test_a_segment_that_cannot_be_allocated_answers_system_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = Sent()

    async def scenario(w: Wire) -> None:
        assert (await sent.send(w))[0] == ResponseCode.SUCCESS
        monkeypatch.setattr(disk, "fallocate", NoSpaceForCommitLog())
        for _ in range(8):  # 300 KB records: the fourth needs a second 1 MiB segment
            code, remark = await sent.send(w, body_bytes=300_000)
            if code != ResponseCode.SUCCESS:
                break
        assert code == ResponseCode.SYSTEM_ERROR and remark.startswith("create mapped file failed"), remark
        assert "No space left on device" in remark
        monkeypatch.undo()  # space returns
        assert (await sent.send(w, body_bytes=300_000))[0] == ResponseCode.SUCCESS
        await sent.assert_all_pulled(w)

    run_broker(tmp_path / "store", scenario, **SYNC_PATIENT)


def test_above_disk_space_warning_level_sends_get_service_not_available_until_space_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = Sent()

    async def scenario(w: Wire) -> None:
        store = w.broker.store
        assert store is not None
        assert (await sent.send(w))[0] == ResponseCode.SUCCESS
        used = [0.95]
        monkeypatch.setattr(store.retention, "disk_used_ratio", lambda: used[0])
        await until(lambda: store.retention.write_refusal is not None)  # the periodic check saw it
        code, remark = await sent.send(w)
        assert code == ResponseCode.SERVICE_NOT_AVAILABLE and "disk is full" in remark, remark
        await sent.assert_all_pulled(w)
        used[0] = 0.5
        await until(lambda: store.retention.write_refusal is None)
        assert (await sent.send(w))[0] == ResponseCode.SUCCESS
        await sent.assert_all_pulled(w)

    run_broker(tmp_path / "store", scenario, clean_resource_interval=20)


async def until(predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Wait on the loop until ``predicate()`` holds (fails after ``timeout_s``)."""
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.01)


def test_disk_keys_of_broker_conf_reach_the_store() -> None:
    config = BrokerConfig.from_properties(
        {
            "diskMaxUsedSpaceRatio": "70",
            "diskSpaceCleanForciblyRatio": "80",
            "diskSpaceWarningLevelRatio": "88",
            "cleanFileForciblyEnable": "false",
            "cleanResourceInterval": "2000",
            "maxHashSlotNum": "1000",
            "maxIndexNum": "4000",
            "mapedFileSizeConsumeQueue": "6000",
        }
    )
    store = config.store_config()
    assert (
        store.disk_max_used_space_ratio,
        store.disk_space_clean_forcibly_ratio,
        store.disk_space_warning_level_ratio,
    ) == (0.70, 0.80, 0.88)
    assert store.clean_file_forcibly_enable is False and store.clean_resource_interval_ms == 2000
    assert (store.index_hash_slots, store.index_entries, store.consume_queue_units_per_file) == (1000, 4000, 300)
    defaults = BrokerConfig().store_config()
    assert (defaults.disk_space_clean_forcibly_ratio, defaults.disk_space_warning_level_ratio) == (0.85, 0.90)
    assert defaults.clean_file_forcibly_enable is True
    with pytest.raises(ConfigError, match="diskSpaceWarningLevelRatio 101"):
        BrokerConfig.from_properties({"diskSpaceWarningLevelRatio": "101"})
    with pytest.raises(ConfigError, match="maxIndexNum 0"):
        BrokerConfig.from_properties({"maxIndexNum": "0"})
