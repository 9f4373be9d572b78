"""A replica's divergent tail cut (controller mode): CommitLog, ConsumeQueues, index and queue offsets follow."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkmq.errors import StoreError
from sparkmq.message import iter_records
from sparkmq.store import GetMessageStatus, MessageStore
from support.store_data import make_batch, tiny_config


def bodies(store: MessageStore, topic: str, queue_id: int) -> list[bytes]:
    got = store.get_messages("g", topic, queue_id, 0, 1000, max_bytes=1 << 30)
    if got.status is not GetMessageStatus.FOUND:
        return []
    return [bytes(r.body) for r in iter_records(got.body(), check_crc=True)]


def test_a_cut_replica_forgets_its_tail_and_continues_from_the_cut(tmp_path: Path) -> None:
    store = MessageStore(tiny_config(tmp_path / "store"))
    store.start()
    try:
        kept = store.put_messages(make_batch("T", 0, 5))
        cut_at = kept.wrote_offset + int(kept.sizes.sum())
        store.put_messages(make_batch("T", 0, 3, start=5))
        store.put_messages(make_batch("U", 1, 2))
        with pytest.raises(StoreError):
            store.truncate_replica(cut_at)  # a master's log is not cut
        store.slave_mode = True
        assert store.truncate_replica(cut_at) == cut_at == store.commitlog.max_offset
        assert len(bodies(store, "T", 0)) == 5 and bodies(store, "U", 1) == []
        assert store.max_offset_in_queue("T", 0) == 5
        assert store.query_messages("T", "key6", 10) == [] and store.query_messages("T", "key4", 10)
        store.slave_mode = False
        again = store.put_messages(make_batch("T", 0, 1, start=100))
        assert (again.queue_offset, again.wrote_offset) == (5, cut_at)
    finally:
        store.close()
    reopened = MessageStore(tiny_config(tmp_path / "store"))
    reopened.start()
    try:
        assert len(bodies(reopened, "T", 0)) == 6 and reopened.commitlog.max_offset > cut_at
    finally:
        reopened.close()
