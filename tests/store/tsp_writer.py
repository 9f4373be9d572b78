"""Writer process for test_transient_store_pool: puts through a TransientStorePool, then waits to be killed.

Usage: python tsp_writer.py STORE_DIR SEED BATCHES

Puts batches 0..BATCHES-1 (the segments roll, so full ones are committed as the pool runs
dry), commits, prints ``committed <commitlog offset>``, then puts batches that stay in the
current segment's buffer (never committed: the commit service's interval is an hour) and prints
``uncommitted <first seq> <count> <visible> <on disk>``: whether a read found the last one, and
whether its bytes were in the file. Then it waits to be SIGKILLed.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from sparkmq.store import FlushDiskType, GetMessageStatus, MessageStore, StoreConfig
from support.store_checks import Expected, crash_config, expected_batch

BATCH_MAX_COUNT = 4
BATCH_MAX_BODY = 600


def tsp_config(root: Path) -> StoreConfig:
    """crash_config with ASYNC flush and a two-buffer pool committing only when told."""
    return crash_config(
        root,
        flush_disk_type=FlushDiskType.ASYNC_FLUSH,
        transient_store_pool_enable=True,
        transient_store_pool_size=2,
        commit_interval_commitlog_ms=3_600_000,
    )


def batch(seed: int, seq: int) -> Expected:
    return expected_batch(seed, seq, BATCH_MAX_COUNT, BATCH_MAX_BODY)


def main(argv: list[str]) -> int:
    root, seed, batches = Path(argv[1]), int(argv[2]), int(argv[3])
    store = MessageStore(tsp_config(root))
    store.start()
    for seq in range(batches):
        assert store.put_messages(batch(seed, seq).batch()).ok
    store.flusher.commit_commitlog()
    print(f"committed {store.commitlog.max_offset}", flush=True)
    seq, last = batches, None
    while store.commitlog.queue.files[-1].remaining > 8 * 1024:
        expected = batch(seed, seq)
        last = (expected, store.put_messages(expected.batch()))
        assert last[1].ok
        seq += 1
    assert last is not None
    expected, result = last
    got = store.get_messages("g", "CrashT", expected.queue_id, result.queue_offset, 1)
    segment = store.commitlog.queue.find(result.wrote_offset)
    assert segment is not None
    fd = os.open(segment.path, os.O_RDONLY)
    try:
        on_disk = any(os.pread(fd, 64, result.wrote_offset - segment.start_offset))
    finally:
        os.close(fd)
    visible = got.status is GetMessageStatus.FOUND
    print(f"uncommitted {batches} {seq - batches} {int(visible)} {int(on_disk)}", flush=True)
    time.sleep(120)  # SIGKILLed long before
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
