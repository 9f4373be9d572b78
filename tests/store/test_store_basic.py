"""MessageStore behaviour over real files: rolls, reads, statuses, lookups, restarts."""

from __future__ import annotations

import os
import threading
from itertools import pairwise
from pathlib import Path

import pytest

from sparkmq.errors import StoreLockedError
from sparkmq.message import decode_record, iter_records, java_string_hash
from sparkmq.message import layout as L
from sparkmq.store import GetMessageStatus, MessageStore, PutMessageStatus
from sparkmq.store.index_file import index_key_hashes
from support.store_data import make_batch, tiny_config


def read_all(store: MessageStore, topic: str, queue_id: int, start: int = 0) -> list:
    messages, offset = [], start
    while True:
        got = store.get_messages("g", topic, queue_id, offset, 64, max_bytes=1 << 30)
        if got.status is not GetMessageStatus.FOUND:
            return messages
        messages.extend(iter_records(got.body(), check_crc=True))
        offset = got.next_begin_offset


def test_put_assigns_dense_queue_offsets_and_physical_positions(store: MessageStore) -> None:
    first = store.put_messages(make_batch("T", 0, 3))
    second = store.put_messages(make_batch("T", 0, 2, start=3))
    other = store.put_messages(make_batch("T", 1, 1))
    assert (first.queue_offset, second.queue_offset, other.queue_offset) == (0, 3, 0)
    assert first.physical_offsets.tolist() == [0, int(first.sizes[0]), int(first.sizes[0] + first.sizes[1])]
    assert second.wrote_offset == int(first.physical_offsets[-1] + first.sizes[-1])
    stored = decode_record(store.commitlog.read(second.wrote_offset, int(second.sizes[0])))
    assert (stored.queue_offset, stored.physical_offset, stored.topic) == (3, second.wrote_offset, "T")
    assert stored.offset_msg_id == second.msg_ids()[0]


def test_segments_roll_with_blank_filler_and_reads_cross_segments(store: MessageStore) -> None:
    for i in range(0, 400, 20):
        assert store.put_messages(make_batch("T", 0, 20, start=i)).ok
    files = store.commitlog.queue.files
    assert len(files) >= 3
    for previous, following in pairwise(files):
        assert following.start_offset == previous.start_offset + previous.file_bytes
        assert following.path.name == f"{following.start_offset:020d}"
    # The first segment ends with an END_OF_FILE filler whose size is exactly what was left.
    units = store.consume_queue("T", 0).read_units(0, 400)
    ends = (units["offset"] + units["size"]).astype(int)
    last_in_first = int(ends[ends <= files[0].file_bytes].max())
    filler = files[0].read(last_in_first, 8)
    assert int.from_bytes(filler[:4], "big") == files[0].file_bytes - last_in_first
    assert int.from_bytes(filler[4:], "big", signed=True) == L.BLANK_MAGIC_CODE
    messages = read_all(store, "T", 0)
    assert [m.queue_offset for m in messages] == list(range(400))
    assert [bytes(m.body).split(b":")[0] for m in messages] == [f"T-0-{i}".encode() for i in range(400)]


def test_get_messages_statuses_and_next_offsets(store: MessageStore) -> None:
    assert store.get_messages("g", "missing", 0, 0, 10).status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
    store.put_messages(make_batch("T", 0, 5))
    got = store.get_messages("g", "T", 0, 2, 2)
    assert (got.status, got.message_count, got.next_begin_offset, got.queue_offsets.tolist()) == (
        GetMessageStatus.FOUND,
        2,
        4,
        [2, 3],
    )
    one = store.get_messages("g", "T", 0, 5, 10)
    assert (one.status, one.next_begin_offset) == (GetMessageStatus.OFFSET_OVERFLOW_ONE, 5)
    bad = store.get_messages("g", "T", 0, 99, 10)
    assert (bad.status, bad.next_begin_offset) == (GetMessageStatus.OFFSET_OVERFLOW_BADLY, 5)
    size = int(got.sizes[0])
    limited = store.get_messages("g", "T", 0, 0, 10, max_bytes=2 * size + 1)
    assert (limited.message_count, limited.next_begin_offset) == (2, 2)
    huge_first = store.get_messages("g", "T", 0, 0, 10, max_bytes=1)
    assert huge_first.message_count == 1


def test_tag_filter_skips_unmatched_units(store: MessageStore) -> None:
    store.put_messages(make_batch("T", 0, 3, tag="A"))
    store.put_messages(make_batch("T", 0, 3, start=3, tag="B"))
    store.put_messages(make_batch("T", 0, 3, start=6, tag="A"))
    got = store.get_messages("g", "T", 0, 0, 100, tags_codes={java_string_hash("A")})
    assert got.queue_offsets.tolist() == [0, 1, 2, 6, 7, 8]
    assert got.next_begin_offset == 9
    none = store.get_messages("g", "T", 0, 3, 100, tags_codes={java_string_hash("C")})
    assert (none.status, none.next_begin_offset) == (GetMessageStatus.NO_MATCHED_MESSAGE, 9)


def test_bad_messages_get_statuses_and_store_keeps_serving(store: MessageStore) -> None:
    too_big = make_batch("T", 0, 1, body_bytes=store.config.max_message_bytes)
    result = store.put_messages(too_big)
    assert result.status is PutMessageStatus.MESSAGE_ILLEGAL and "maxMessageSize" in result.remark
    bad_topic = make_batch("bad topic!", 0, 1)
    assert store.put_messages(bad_topic).status is PutMessageStatus.MESSAGE_ILLEGAL
    assert store.put_messages(make_batch("T", 0, 1)).ok
    assert len(read_all(store, "T", 0)) == 1


def test_query_by_key_and_unique_key_newest_first(store: MessageStore) -> None:
    store.put_messages(make_batch("T", 0, 10))
    store.put_messages(make_batch("T", 1, 10))  # same KEYS values on another queue
    found = store.query_messages("T", "key4", 10)
    assert sorted(m.queue_id for m in found) == [0, 1]
    assert found[0].physical_offset > found[1].physical_offset
    by_id = store.query_messages("T", "U0100000007", 10)
    assert [(m.queue_id, m.queue_offset) for m in by_id] == [(1, 7)]
    assert store.query_messages("Other", "key4", 10) == []


def test_index_rolls_to_new_files_and_still_answers(store: MessageStore) -> None:
    for i in range(0, 300, 30):  # 2 keys per message, 200 entries per file
        store.put_messages(make_batch("T", 0, 30, start=i))
    assert len(store.index.files) >= 3
    assert [m.queue_offset for m in store.query_messages("T", "key5", 5)] == [5]
    assert [m.queue_offset for m in store.query_messages("T", "key295", 5)] == [295]


def test_offset_lookups(store: MessageStore) -> None:
    assert store.earliest_message_time("T", 0) == -1
    store.put_messages(make_batch("T", 0, 4))
    earliest = store.earliest_message_time("T", 0)
    assert earliest > 0
    assert store.offset_by_timestamp("T", 0, 0) == 0
    assert store.offset_by_timestamp("T", 0, earliest + 10**9) == 4
    assert (store.min_offset_in_queue("T", 0), store.max_offset_in_queue("T", 0)) == (0, 4)
    looked = store.look_message_by_offset(0)
    assert looked is not None and looked.queue_offset == 0
    assert store.look_message_by_offset(store.commitlog.max_offset + 1000) is None


def test_restart_keeps_messages_and_continues_offsets(tmp_path: Path) -> None:
    config = tiny_config(tmp_path / "s")
    with MessageStore(config) as first:
        for i in range(0, 100, 10):
            first.put_messages(make_batch("T", (i // 10) % 2, 10, start=i))
        before = {q: [bytes(m.body) for m in read_all(first, "T", q)] for q in (0, 1)}
    assert not config.abort_path.exists()
    with MessageStore(config) as second:
        assert second.running
        assert {q: [bytes(m.body) for m in read_all(second, "T", q)] for q in (0, 1)} == before
        assert second.put_messages(make_batch("T", 0, 1, start=999)).queue_offset == 50


def test_second_store_on_same_directory_is_refused(store: MessageStore) -> None:
    with pytest.raises(StoreLockedError):
        MessageStore(store.config).start()


def test_dispatch_listener_sees_new_max_offsets(store: MessageStore) -> None:
    seen: list[tuple[str, int, int]] = []
    store.add_dispatch_listener(lambda topic, queue_id, max_offset: seen.append((topic, queue_id, max_offset)))
    store.put_messages(make_batch("T", 2, 3))
    store.put_messages(make_batch("T", 2, 1, start=3))
    assert seen == [("T", 2, 3), ("T", 2, 4)]


def test_sync_flush_acknowledges_after_fsync_and_writers_share_fsyncs(sync_store: MessageStore) -> None:
    calls = []
    original = sync_store.commitlog.flush

    def counting_flush() -> int:
        calls.append(1)
        return original()

    sync_store.commitlog.flush = counting_flush
    results = []

    def writer(queue_id: int) -> None:
        for i in range(25):
            results.append(sync_store.put_messages(make_batch("T", queue_id, 1, start=i)))

    threads = [threading.Thread(target=writer, args=(q,)) for q in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 200 and all(r.ok for r in results)
    assert sync_store.commitlog.queue.flushed_offset >= max(int(r.physical_offsets[-1] + r.sizes[-1]) for r in results)
    assert len(calls) < 200  # group commit: concurrent writers share fsyncs


def test_transactional_half_types_are_not_dispatched(store: MessageStore) -> None:
    batch = make_batch("T", 0, 1)
    batch.sys_flag = L.TRANSACTION_PREPARED_TYPE
    result = store.put_messages(batch)
    assert result.ok and result.queue_offset == 0
    assert store.max_offset_in_queue("T", 0) == 0
    assert store.look_message_by_offset(result.wrote_offset) is not None


def test_files_are_fixed_size_and_named_by_offset(store: MessageStore) -> None:
    store.put_messages(make_batch("T", 0, 1))
    segment = store.commitlog.queue.files[0]
    assert os.path.getsize(segment.path) == store.config.commitlog_file_bytes
    cq_file = store.consume_queue("T", 0).files.files[0]
    assert cq_file.path.parent == store.config.consume_queue_dir / "T" / "0"
    assert os.path.getsize(cq_file.path) == 32 * 20


def test_an_entry_indexed_twice_is_found_once(store: MessageStore) -> None:
    """A crash between an index entry and its file header leaves the entry to be written again on
    recovery; a query names each message once whatever the index holds."""
    store.put_messages(make_batch("T", 0, 3))
    first = store.query_messages("T", "key1", 10)
    assert len(first) == 1
    again = int(index_key_hashes(["T#key1"])[0])
    newest = store.index.files[-1]
    newest.put([again], [first[0].physical_offset], [first[0].store_timestamp])  # what such a replay writes
    assert [m.physical_offset for m in store.query_messages("T", "key1", 10)] == [first[0].physical_offset]
    assert len(store.index.query("T#key1", 10, 0, 2**62)) == 1
