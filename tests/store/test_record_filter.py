"""Reads with a record filter (SQL92 subscriptions): the store hands each candidate's properties
to the filter and keeps RocketMQ's read contract (counts, byte limits, where the next read starts)."""

from __future__ import annotations

import random

import pytest

from sparkmq.message import MessageBatch, decode_properties, encode_properties
from sparkmq.message.record import iter_records
from sparkmq.store import GetMessageStatus, MessageStore
from sparkmq.store.reads import MAX_RECORD_FILTER_SCAN_UNITS

TOPIC = "FilterTopic"


def put_numbered(store: MessageStore, count: int, tags: tuple[str, ...] = ("TagA",)) -> None:
    for first in range(0, count, 50):
        numbers = range(first, min(first + 50, count))
        props = [encode_properties({"n": str(n), "TAGS": tags[n % len(tags)]}) for n in numbers]
        assert store.put_messages(MessageBatch(TOPIC, 0, [b"body-%d" % n for n in numbers], props)).ok


def keep_multiples_of(k: int):
    return lambda raw: int(decode_properties(raw)["n"]) % k == 0


def numbers_of(result) -> list[int]:
    return [int(m.properties["n"]) for m in iter_records(result.body(), check_crc=True)]


def test_only_accepted_records_come_back_and_the_next_read_resumes_after_the_last(store: MessageStore) -> None:
    put_numbered(store, 300)
    result = store.get_messages("G", TOPIC, 0, 0, 32, record_filter=keep_multiples_of(7))
    assert result.status is GetMessageStatus.FOUND
    assert numbers_of(result) == list(range(0, 300, 7))[:32]
    assert result.next_begin_offset == 7 * 31 + 1
    assert list(result.queue_offsets) == list(range(0, 300, 7))[:32]


def test_a_read_that_matches_nothing_moves_past_what_it_scanned(store: MessageStore) -> None:
    put_numbered(store, 120)
    result = store.get_messages("G", TOPIC, 0, 0, 32, record_filter=lambda raw: False)
    assert result.status is GetMessageStatus.NO_MATCHED_MESSAGE
    assert result.next_begin_offset == 120


def test_the_scan_window_is_bounded(store: MessageStore) -> None:
    put_numbered(store, MAX_RECORD_FILTER_SCAN_UNITS + 100)
    result = store.get_messages("G", TOPIC, 0, 0, 32, record_filter=lambda raw: False)
    assert result.next_begin_offset == MAX_RECORD_FILTER_SCAN_UNITS  # the client pulls again from there


def test_tag_codes_and_record_filter_combine_and_byte_limits_hold(store: MessageStore) -> None:
    put_numbered(store, 200, tags=("TagA", "TagB"))
    tag_a = {store.coder.code(b"TagA")}
    result = store.get_messages("G", TOPIC, 0, 0, 1000, tags_codes=tag_a, record_filter=keep_multiples_of(3))
    assert numbers_of(result) == [n for n in range(200) if n % 2 == 0 and n % 3 == 0]
    result = store.get_messages(
        "G", TOPIC, 0, 0, 1000, max_bytes=1, tags_codes=tag_a, record_filter=keep_multiples_of(3)
    )
    assert numbers_of(result) == [0]  # one message always goes, however large
    assert result.next_begin_offset == 1


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_filters_agree_with_filtering_everything_afterwards(store: MessageStore, seed: int) -> None:
    rng = random.Random(seed)
    put_numbered(store, 400)
    wanted = {n for n in range(400) if rng.random() < 0.2}
    got, offset = [], 0
    while offset < 400:
        result = store.get_messages(
            "G",
            TOPIC,
            0,
            offset,
            rng.randint(1, 40),
            record_filter=lambda raw: int(decode_properties(raw)["n"]) in wanted,
        )
        got += numbers_of(result) if result.status is GetMessageStatus.FOUND else []
        assert result.next_begin_offset > offset
        offset = result.next_begin_offset
    assert got == sorted(wanted)
