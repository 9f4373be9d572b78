"""The source's loop-free scans against their references: ``find_record_starts`` vs ``record_starts``
(walking sizes), ``property_scan.find_values`` vs ``find_property`` / ``decode_properties`` per record."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from message.test_property_table import LOOKED_UP, batches

from sparkmq.errors import CorruptRecordError
from sparkmq.message import layout as L
from sparkmq.message.bulk import decode_columns, find_record_starts
from sparkmq.message.properties import decode_properties, find_property
from sparkmq.message.property_scan import find_values
from sparkmq.message.record import Host, MessageBatch, encode_records_plain, record_starts

MAGIC = L.MESSAGE_MAGIC_CODE.to_bytes(4, "big", signed=True)
NAMES = tuple(key.decode() for key in LOOKED_UP)


def _records(bodies: list[bytes]) -> bytes:
    batch = MessageBatch("TopicScan", 0, bodies, [b"TAGS\x01A"] * len(bodies))
    return encode_records_plain(batch, 0, len(bodies), 0, 0, 1, Host(b"\x7f\x00\x00\x01", 10911))


body_parts = st.lists(
    st.sampled_from([b"x", b"\x00", MAGIC, b"\x00\x00\x00\x5b" + MAGIC, b"\xda", b"\xda\xa3"]), max_size=8
).map(b"".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(body_parts, min_size=1, max_size=10))
def test_record_starts_agree_even_when_bodies_hold_the_magic_code(bodies: list[bytes]) -> None:
    buffer = _records(bodies)
    assert find_record_starts(buffer).tolist() == record_starts(buffer).tolist()
    assert [bytes(decode_columns(buffer).body(i)) for i in range(len(bodies))] == bodies


@pytest.mark.parametrize("cut", [1, 50, 95])
def test_a_truncated_buffer_is_corrupt_either_way(cut: int) -> None:
    buffer = _records([b"a" * 10, b"b" * 10])[:-cut]
    for scan in (find_record_starts, record_starts):
        with pytest.raises(CorruptRecordError):
            scan(buffer)


def _found(properties: list[bytes]) -> list[list[bytes | None]]:
    data = np.frombuffer(b"".join(properties), dtype=np.uint8)
    offsets = np.cumsum([0] + [len(p) for p in properties]).astype(np.int64)
    return [
        [bytes(data[s : s + n]) if n >= 0 else None for s, n in zip(starts.tolist(), lengths.tolist(), strict=True)]
        for starts, lengths in find_values(data, offsets, NAMES)
    ]


@settings(max_examples=400, deadline=None)
@given(batches)
def test_values_agree_with_find_property_and_decode_properties(properties: list[bytes]) -> None:
    for name, column in zip(NAMES, _found(properties), strict=True):
        assert column == [find_property(raw, name.encode()) for raw in properties], name
        assert [None if v is None else v.decode("utf-8", errors="replace") for v in column] == [
            decode_properties(raw).get(name) for raw in properties
        ], name


def test_the_last_non_empty_value_wins_and_lookalike_names_do_not_count() -> None:
    assert _found([b"TAGS\x01A\x02TAGS\x01B", b"KEYS\x01x", b"MYTAGS\x01m\x02TAGSX\x01n", b"TAGS\x01C\x02TAGS\x01"])[
        0
    ] == [b"B", None, None, b"C"]
    assert _found([]) == [[], [], [], []] and _found([b"", b"\x02"])[0] == [None, None]
