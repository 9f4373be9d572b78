"""Retention: old CommitLog segments go, dependent ConsumeQueue files follow, reads below the minimum report it."""

from __future__ import annotations

import time
from pathlib import Path

from sparkmq.store import GetMessageStatus, MessageStore
from support.store_data import age_segments, fill, make_batch, tiny_config


def test_nothing_is_deleted_outside_the_delete_hour(tmp_path: Path) -> None:
    with MessageStore(tiny_config(tmp_path / "s", file_reserved_time_hours=1)) as store:
        fill(store, 400)
        age_segments(store, 5)
        assert store.retention.run().deleted_segments == 0


def test_time_trigger_deletes_old_segments_but_never_the_newest(tmp_path: Path) -> None:
    hour = time.strftime("%H")
    with MessageStore(
        tiny_config(tmp_path / "s", file_reserved_time_hours=1, delete_when=f"{hour};{(int(hour) + 1) % 24:02d}")
    ) as store:
        fill(store, 600)
        segments = len(store.commitlog.queue.files)
        assert store.retention.run().deleted_segments == 0  # young files stay
        age_segments(store, 2)
        report = store.retention.run()
        assert report.time_trigger and report.deleted_segments == min(segments - 1, 10)
        assert len(store.commitlog.queue.files) >= 1
        assert store.commitlog.min_offset == store.commitlog.queue.files[0].start_offset > 0


def test_space_trigger_deletes_at_once_and_reads_below_minimum_report_it(tmp_path: Path) -> None:
    with MessageStore(
        tiny_config(tmp_path / "s", disk_max_used_space_ratio=0.0, disk_space_clean_forcibly_ratio=0.0)
    ) as store:
        fill(store, 600)
        queue = store.consume_queue("T", 0)
        files_before = len(queue.files.files)
        report = store.retention.run()
        assert report.space_trigger and report.deleted_segments > 0
        low = store.min_offset_in_queue("T", 0)
        assert low > 0
        assert len(queue.files.files) < files_before  # ConsumeQueue files wholly below the minimum went
        below = store.get_messages("g", "T", 0, 0, 10)
        assert (below.status, below.next_begin_offset) == (GetMessageStatus.OFFSET_TOO_SMALL, low)
        at_min = store.get_messages("g", "T", 0, low, 10)
        assert at_min.status is GetMessageStatus.FOUND and at_min.queue_offsets[0] == low
        first = store.look_message_by_offset(0)
        assert first is None
        assert store.put_messages(make_batch("T", 0, 1, start=600)).queue_offset == 600


def test_minimum_survives_restart(tmp_path: Path) -> None:
    config = tiny_config(tmp_path / "s", disk_max_used_space_ratio=0.0, disk_space_clean_forcibly_ratio=0.0)
    with MessageStore(config) as store:
        fill(store, 600)
        store.retention.run()
        low = store.min_offset_in_queue("T", 0)
    with MessageStore(tiny_config(tmp_path / "s")) as again:
        assert again.min_offset_in_queue("T", 0) == low
        assert again.get_messages("g", "T", 0, low, 1).status is GetMessageStatus.FOUND
        assert again.get_messages("g", "T", 0, 0, 1).status is GetMessageStatus.OFFSET_TOO_SMALL
