"""The periodic ConsumeQueue flush syncs a queue once enough units wait (RocketMQ's
``flushConsumeQueueLeastPages``), every queue at a thorough flush, and moves the checkpoint's
ConsumeQueue time only then: with a thousand queues taking a few units a second each, one msync
per queue per second was most of the broker's flush work."""

from __future__ import annotations

from pathlib import Path

from sparkmq.store import MessageStore
from support.store_data import make_batch, tiny_config

HOUR_MS = 3_600_000  # the periodic flush thread stays out of the way: the test calls the flushes


def test_a_queue_is_synced_once_enough_units_wait_and_every_queue_at_a_thorough_flush(tmp_path: Path) -> None:
    config = tiny_config(
        tmp_path / "store",
        consume_queue_units_per_file=1000,
        index_entries=2000,
        flush_interval_consume_queue_ms=HOUR_MS,
        flush_consume_queue_thorough_interval_ms=HOUR_MS,
        flush_consume_queue_least_pages=1,
    )
    store = MessageStore(config)
    store.start()
    try:
        store.put_messages(make_batch("Few", 0, 3))  # 60 bytes of units: under a page
        store.put_messages(make_batch("Many", 1, 300))  # 6,000 bytes: over a page
        few, many = store.consume_queue("Few", 0), store.consume_queue("Many", 1)
        assert few is not None and many is not None and store.checkpoint is not None
        assert (few.files.unflushed_bytes, many.files.unflushed_bytes) == (60, 6000)
        before = store.checkpoint.logics_msg_timestamp

        store.flusher.flush_indexes_if_due()
        assert (few.files.unflushed_bytes, many.files.unflushed_bytes) == (60, 0)
        assert store.checkpoint.logics_msg_timestamp == before, "not every queue is flushed yet"

        store.flusher.flush_indexes()  # the thorough flush (and the one at close)
        assert few.files.unflushed_bytes == 0
        assert store.checkpoint.logics_msg_timestamp > before
    finally:
        store.close()
