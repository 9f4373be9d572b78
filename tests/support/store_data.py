"""Store test helpers: tiny segments so rolls, fillers and retention happen with little data."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from sparkmq.message import MessageBatch, encode_properties
from sparkmq.store import StoreConfig

if TYPE_CHECKING:
    from sparkmq.store import MessageStore


def tiny_config(root: Path, **overrides: object) -> StoreConfig:
    """A store config with 16 KiB CommitLog segments and 32-unit ConsumeQueue files."""
    settings: dict[str, object] = dict(
        commitlog_file_bytes=16 * 1024,
        consume_queue_units_per_file=32,
        index_hash_slots=64,
        index_entries=200,
        delete_when="",
        disk_max_used_space_ratio=1.0,
        disk_space_clean_forcibly_ratio=1.0,
        disk_space_warning_level_ratio=1.0,
        max_mapped_consume_queue_files=3,  # store tests map and unmap ConsumeQueue files all the time
    )
    settings.update(overrides)
    return StoreConfig(root, **settings)


def make_batch(
    topic: str, queue_id: int, count: int, start: int = 0, body_bytes: int = 100, tag: str = "TagA"
) -> MessageBatch:
    """``count`` messages whose bodies and keys are numbered from ``start``."""
    bodies = [f"{topic}-{queue_id}-{start + i}:".encode().ljust(body_bytes, b".") for i in range(count)]
    props = [
        encode_properties({"TAGS": tag, "KEYS": f"key{start + i}", "UNIQ_KEY": f"U{queue_id:02d}{start + i:08d}"})
        for i in range(count)
    ]
    return MessageBatch(topic, queue_id, bodies, props, born_timestamp=1_700_000_000_000)


def fill(store: MessageStore, count: int, topic: str = "T") -> None:
    """``count`` numbered messages into queue 0 of ``topic``, 20 per put."""
    for i in range(0, count, 20):
        assert store.put_messages(make_batch(topic, 0, 20, start=i)).ok


def age_segments(store: MessageStore, hours: float) -> None:
    """Make every CommitLog segment look ``hours`` old (retention goes by modification time)."""
    past = time.time() - hours * 3600
    for mapped in store.commitlog.queue.files:
        os.utime(mapped.path, (past, past))


@contextmanager
def retained_store(root: Path, count: int = 600) -> Iterator[MessageStore]:
    """A running store of ``count`` messages in T/0 whose oldest segments retention deleted (their
    units still in the ConsumeQueue)."""
    from sparkmq.store import MessageStore

    hour = time.strftime("%H")
    config = tiny_config(root, file_reserved_time_hours=1, delete_when=f"{hour};{(int(hour) + 1) % 24:02d}")
    with MessageStore(config) as store:
        fill(store, count)
        age_segments(store, 2)
        assert store.retention.run().deleted_segments > 0
        yield store
