"""Retention under disk pressure, as RocketMQ's CleanCommitLogService does it.

Above ``diskMaxUsedSpaceRatio`` only expired segments go (at once, not waiting for
``deleteWhen``); above ``diskSpaceCleanForciblyRatio`` with ``cleanFileForciblyEnable`` young
ones go too; above ``diskSpaceWarningLevelRatio`` writes are refused until usage falls back to
the clean-forcibly ratio. Deleting never makes puts and reads wait behind an fsync.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from sparkmq.store import FlushDiskType, MessageStore, PutMessageStatus, disk
from support.disk_faults import StalledSync
from support.processes import wait_until
from support.store_data import age_segments, fill, make_batch, tiny_config


def pressure_config(root: Path, forcibly: bool) -> object:
    return tiny_config(
        root,
        file_reserved_time_hours=1,
        disk_max_used_space_ratio=0.75,
        disk_space_clean_forcibly_ratio=0.85,
        disk_space_warning_level_ratio=0.90,
        clean_file_forcibly_enable=forcibly,
    )


@pytest.mark.parametrize(
    ("ratio", "forcibly", "young_deleted"),
    [
        (0.70, True, False),
        (0.80, True, False),
        (0.87, False, False),
        (0.87, True, True),
        (0.95, True, True),
    ],
)
def test_young_segments_go_only_above_clean_forcibly_ratio_when_enabled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ratio: float, forcibly: bool, young_deleted: bool
) -> None:
    with MessageStore(pressure_config(tmp_path / "s", forcibly)) as store:
        fill(store, 600)
        monkeypatch.setattr(store.retention, "disk_used_ratio", lambda: ratio)
        report = store.retention.run()
        assert report.space_trigger is (ratio > 0.75)
        assert (report.deleted_segments > 0) is young_deleted
        if not young_deleted:
            age_segments(store, 2)
            assert (store.retention.run().deleted_segments > 0) is (ratio > 0.75)  # expired ones go at once


def test_writes_are_refused_above_the_warning_ratio_until_below_clean_forcibly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with MessageStore(pressure_config(tmp_path / "s", False)) as store:
        fill(store, 20)
        used = [0.95]
        monkeypatch.setattr(store.retention, "disk_used_ratio", lambda: used[0])
        store.retention.run()
        refused = store.put_messages(make_batch("T", 0, 1, start=20))
        assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        assert "disk is full" in refused.remark and "diskSpaceWarningLevelRatio 90%" in refused.remark
        assert store.get_messages("g", "T", 0, 0, 20).message_count == 20  # reads go on
        used[0] = 0.87  # between the two ratios: still refused (RocketMQ's hysteresis)
        store.retention.run()
        assert store.put_messages(make_batch("T", 0, 1, start=20)).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        used[0] = 0.80
        store.retention.run()
        assert store.put_messages(make_batch("T", 0, 1, start=20)).ok


def test_deleting_segments_never_makes_puts_and_reads_wait_behind_an_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tiny_config(tmp_path / "s", flush_disk_type=FlushDiskType.SYNC_FLUSH, disk_space_clean_forcibly_ratio=0.0)
    stall = StalledSync()

    with MessageStore(config) as store:
        fill(store, 600)
        monkeypatch.setattr(disk, "fdatasync", stall)
        waiting_put = threading.Thread(target=store.put_messages, args=(make_batch("T", 0, 1, start=600),))
        waiting_put.start()  # its group commit now holds the flush lock inside the stalled fsync
        assert stall.entered.wait(10)
        reports = []
        cleaner = threading.Thread(target=lambda: reports.append(store.retention.run(force=True)))
        cleaner.start()
        assert wait_until(lambda: bool(store.commitlog.queue.retired))  # listed out, waiting to unmap
        served = []

        def put_and_read() -> None:
            result, _flushed = store.submit_messages(make_batch("T", 0, 1, start=601))
            served.append(
                (result.ok, store.get_messages("g", "T", 0, store.min_offset_in_queue("T", 0), 5).message_count)
            )

        worker = threading.Thread(target=put_and_read)
        worker.start()
        worker.join(30)  # a deadlock guard, not a timing assertion
        alive = worker.is_alive()
        stall.release.set()
        for thread in (worker, cleaner, waiting_put):
            thread.join()
        assert not alive and served == [(True, 5)]
        assert reports[0].deleted_segments > 0 and not store.commitlog.queue.retired
        first_live = store.commitlog.queue.files[0].path.name
        assert not [p for p in config.commitlog_dir.iterdir() if p.name < first_live]
