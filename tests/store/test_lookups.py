"""store/lookups.py over a real store: store times by queue offset, records by physical offset, key checks."""

from __future__ import annotations

import time

from sparkmq.message import MessageBatch, encode_properties
from sparkmq.store import MessageStore
from sparkmq.store.lookups import (
    decode_or_none,
    earliest_message_time,
    has_key,
    offset_by_timestamp,
    record_at,
    store_timestamp_at,
)
from support.store_data import make_batch


def put_at_two_times(store: MessageStore) -> tuple[int, int]:
    """Offsets 0-2 stored at one millisecond, 3-4 at a later one; the two store times."""
    first = store.put_messages(make_batch("T", 0, 3)).store_timestamp
    while int(time.time() * 1000) <= first:  # the next put must get a later store time
        pass
    second = store.put_messages(make_batch("T", 0, 2, start=3)).store_timestamp
    assert second > first
    return first, second


def test_offset_by_timestamp_finds_the_first_offset_stored_at_or_after(store: MessageStore) -> None:
    first, second = put_at_two_times(store)
    queue = store.consume_queue("T", 0)
    assert [store_timestamp_at(store.commitlog, queue, offset) for offset in range(5)] == [first] * 3 + [second] * 2
    assert offset_by_timestamp(store.commitlog, queue, first) == 0
    assert offset_by_timestamp(store.commitlog, queue, first + 1) == 3
    assert offset_by_timestamp(store.commitlog, queue, second) == 3
    assert offset_by_timestamp(store.commitlog, queue, second + 1) == 5  # none: the max offset
    assert store.offset_by_timestamp("T", 0, first + 1) == 3
    assert earliest_message_time(store.commitlog, queue) == first == store.earliest_message_time("T", 0)


def test_a_queue_that_does_not_exist_has_no_time_and_offset_zero(store: MessageStore) -> None:
    assert earliest_message_time(store.commitlog, None) == -1
    assert offset_by_timestamp(store.commitlog, None, 123) == 0
    assert store.offset_by_timestamp("Nope", 0, 123) == 0


def test_record_at_reads_a_whole_record_or_nothing(store: MessageStore) -> None:
    put = store.put_messages(make_batch("T", 0, 2))
    second = int(put.physical_offsets[1])
    data = record_at(store.commitlog, second)
    assert data is not None and len(data) == int(put.sizes[1])
    message = decode_or_none(data)
    assert message is not None and (message.queue_offset, message.physical_offset) == (1, second)
    assert record_at(store.commitlog, store.commitlog.max_offset) is None  # past the end
    assert decode_or_none(None) is None


def test_has_key_matches_uniq_key_or_one_of_the_keys_of_its_topic(store: MessageStore) -> None:
    props = encode_properties({"KEYS": "alpha beta", "UNIQ_KEY": "U1"})
    put = store.put_messages(MessageBatch("T", 0, [b"body"], [props]))
    message = store.look_message_by_offset(put.wrote_offset)
    assert message is not None
    assert has_key(message, "T", "beta") and has_key(message, "T", "alpha") and has_key(message, "T", "U1")
    assert not has_key(message, "T", "alpha beta")  # KEYS is a space-separated list
    assert not has_key(message, "T", "gamma")
    assert not has_key(message, "Other", "beta")
    assert [m.physical_offset for m in store.query_messages("T", "beta", 4)] == [put.wrote_offset]


def test_every_offset_inside_a_record_finds_no_message_and_raises_nothing(store: MessageStore) -> None:
    """A message id names a physical offset the client chose: one inside a record is no message."""
    starts = [store.put_messages(make_batch("T", 0, 1, start=k)).wrote_offset for k in range(3)]
    end = store.commitlog.max_offset
    for offset in range(starts[0], end + 8):
        found = store.look_message_by_offset(offset)
        if offset in starts:
            assert found is not None and found.physical_offset == offset
        else:
            assert found is None, offset
