"""Property-based round trips: records (single and bulk decode), properties, batch items."""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from sparkmq.errors import MessageError
from sparkmq.message import (
    Host,
    MessageBatch,
    decode_batch_items,
    decode_columns,
    decode_properties,
    decode_record,
    encode_batch_items,
    encode_properties,
    encode_records,
    iter_records,
)
from sparkmq.message.properties import append_properties, find_property
from sparkmq.message.record import encode_records_bulk, encode_records_plain

MIB = 1024 * 1024
TOPIC_CHARS = "%|abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"
INT32 = st.integers(-(2**31), 2**31 - 1)

# Property text: any unicode except the two separators (and lone surrogates, which are not UTF-8).
prop_text = st.text(st.characters(exclude_characters="\x01\x02", exclude_categories=("Cs",)), min_size=1, max_size=20)
astral_text = st.text(st.characters(min_codepoint=0x10000, exclude_categories=("Cs",)), min_size=1, max_size=4)
key_token = st.text(st.characters(exclude_characters=" \x01\x02", exclude_categories=("Cs",)), min_size=1, max_size=8)


@st.composite
def property_maps(draw: st.DrawFn) -> dict[str, str]:
    props = draw(st.dictionaries(st.one_of(prop_text, astral_text), st.one_of(prop_text, astral_text), max_size=6))
    if draw(st.booleans()):
        props["TAGS"] = draw(prop_text)
    if draw(st.booleans()):
        props["KEYS"] = " ".join(draw(st.lists(key_token, min_size=1, max_size=4)))
    if draw(st.booleans()):
        props["UNIQ_KEY"] = draw(st.text("0123456789ABCDEF", min_size=32, max_size=32))
    return props


def _bytes_of(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


small_bodies = st.binary(max_size=2048)
large_bodies = st.builds(
    _bytes_of, st.one_of(st.sampled_from([0, 1, 4 * MIB]), st.integers(0, 4 * MIB)), st.integers(0, 2**16)
)


@dataclass
class BatchCase:
    batch: MessageBatch
    prop_maps: list[dict[str, str]]
    queue_offset: int
    physical_offset: int
    store_timestamp: int
    store_host: Host


@st.composite
def batch_cases(draw: st.DrawFn) -> BatchCase:
    n = draw(st.integers(1, 50))
    bodies = draw(st.lists(small_bodies, min_size=n, max_size=n))
    for _ in range(draw(st.integers(0, 2))):  # a few large bodies, up to exactly 4 MiB
        bodies[draw(st.integers(0, n - 1))] = draw(large_bodies)
    prop_maps = draw(st.lists(property_maps(), min_size=n, max_size=n))
    ip = st.binary(min_size=4, max_size=4)
    batch = MessageBatch(
        topic=draw(st.text(TOPIC_CHARS, min_size=1, max_size=127)),
        queue_id=draw(st.integers(0, 2**31 - 1)),
        bodies=bodies,
        properties=[encode_properties(p) for p in prop_maps],
        flags=draw(st.none() | st.lists(INT32, min_size=n, max_size=n)),
        sys_flag=draw(st.integers(0, 0xFFFF)) & ~0x30,  # never the IPv6 host bits
        born_timestamp=draw(st.integers(0, 2**63 - 1)),
        born_host=Host(draw(ip), draw(st.integers(0, 65535))),
        reconsume_times=draw(st.integers(0, 16)),
        prepared_transaction_offset=draw(st.integers(0, 2**62)),
    )
    return BatchCase(
        batch,
        prop_maps,
        draw(st.integers(0, 2**40)),
        draw(st.integers(0, 2**40)),
        draw(st.integers(0, 2**62)),
        Host(draw(ip), draw(st.integers(0, 65535))),
    )


HEAD_FIELDS = (
    "total_size",
    "body_crc",
    "queue_id",
    "flag",
    "queue_offset",
    "physical_offset",
    "sys_flag",
    "born_timestamp",
    "store_timestamp",
    "reconsume_times",
    "prepared_transaction_offset",
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(batch_cases())
def test_records_roundtrip_single_and_bulk(case: BatchCase) -> None:
    b = case.batch
    biggest = max(map(len, b.bodies))
    event(
        "a body of exactly 4 MiB" if biggest == 4 * MIB else "a body over 64 KiB" if biggest > 65536 else "small bodies"
    )
    args = (case.queue_offset, case.physical_offset, case.store_timestamp, case.store_host)
    buf = encode_records(b, 0, len(b), *args)
    assert len(buf) == int(b.sizes.sum())
    assert encode_records_plain(b, 0, len(b), *args) == encode_records_bulk(b, 0, len(b), *args) == buf
    cut = len(b) // 2  # a slice starts mid-batch: offsets continue from the arguments
    assert encode_records_plain(b, cut, len(b), *args) == encode_records_bulk(b, cut, len(b), *args)
    assert b.size_list == b.sizes.tolist()
    messages = list(iter_records(memoryview(buf), check_crc=True))
    assert len(messages) == len(b)
    physical = case.physical_offset
    for i, m in enumerate(messages):
        assert bytes(m.body) == b.bodies[i]
        assert m.topic == b.topic
        assert m.properties_raw == b.properties[i]
        assert m.properties == case.prop_maps[i]
        assert m.flag == (b.flags[i] if b.flags is not None else 0)
        assert m.queue_id == b.queue_id
        assert m.queue_offset == case.queue_offset + i
        assert m.physical_offset == physical
        assert m.sys_flag == b.sys_flag
        assert (m.born_timestamp, m.born_host) == (b.born_timestamp, b.born_host)
        assert (m.store_timestamp, m.store_host) == (case.store_timestamp, case.store_host)
        assert m.reconsume_times == b.reconsume_times
        assert m.prepared_transaction_offset == b.prepared_transaction_offset
        assert m.body_crc == zlib.crc32(b.bodies[i]) & 0x7FFFFFFF
        assert m.total_size == int(b.sizes[i])
        physical += m.total_size

    cols = decode_columns(buf)
    assert len(cols) == len(messages)
    for name in HEAD_FIELDS:
        assert cols.heads[name].tolist() == [getattr(m, name) for m in messages], name
    assert cols.heads["body_length"].tolist() == [len(m.body) for m in messages]
    assert [bytes(p).ljust(4, b"\0") for p in cols.heads["born_ip"]] == [m.born_host.ip for m in messages]
    assert [bytes(p).ljust(4, b"\0") for p in cols.heads["store_ip"]] == [m.store_host.ip for m in messages]
    assert cols.heads["born_port"].tolist() == [m.born_host.port for m in messages]
    assert cols.heads["store_port"].tolist() == [m.store_host.port for m in messages]
    assert (cols.starts + case.physical_offset).tolist() == [m.physical_offset for m in messages]
    for i, m in enumerate(messages):
        assert cols.body(i) == m.body
        t, p = int(cols.topic_starts[i]), int(cols.properties_starts[i])
        assert buf[t : t + int(cols.topic_lengths[i])].decode() == m.topic
        assert buf[p : p + int(cols.properties_lengths[i])] == m.properties_raw
        assert cols.message(i) == decode_record(buf, int(cols.starts[i]))


@settings(max_examples=300, deadline=None)
@given(property_maps())
def test_properties_roundtrip(props: dict[str, str]) -> None:
    raw = encode_properties(props)
    assert not raw.endswith(b"\x02")  # Java style: no trailing separator
    assert decode_properties(raw) == props
    assert decode_properties(memoryview(raw)) == props
    assert decode_properties(raw.decode("utf-8")) == props
    assert decode_properties(raw + b"\x02") == props  # C++ / ali-ons trailing separator
    # empty items and items without 0x01 (or with an empty key or value) are skipped
    noisy = b"\x02\x02" + raw.replace(b"\x02", b"\x02\x02junk\x02\x01\x02k\x01\x02") + b"\x02\x02\x01v\x02"
    assert decode_properties(noisy) == props


@settings(max_examples=300, deadline=None)
@given(property_maps(), property_maps())
def test_find_property_agrees_with_decode_properties(first: dict[str, str], extra: dict[str, str]) -> None:
    raws = [
        encode_properties(first),
        encode_properties(first) + b"\x02",
        append_properties(encode_properties(first), encode_properties(extra)),
    ]  # duplicated keys: last wins
    candidates = set(first) | set(extra) | {k[1:] for k in first if len(k) > 1} | set(first.values())
    for raw in raws:
        parsed = decode_properties(raw)
        for key in candidates:
            expected = parsed[key].encode() if key in parsed else None
            assert find_property(raw, key.encode()) == expected, (raw, key)


def test_find_property_examples() -> None:
    raw = b"XTAGS\x01no\x02KEYS\x01k1 k2\x02TAGS\x01TagA\x02E\x01"
    assert find_property(raw, b"TAGS") == b"TagA"
    assert find_property(raw, b"AGS") is None
    assert find_property(raw, b"KEYS") == b"k1 k2"
    assert find_property(raw, b"E") is None  # empty value: skipped like decode_properties
    assert (
        find_property(b"TAGS\x01A\x02TAGS\x01B", b"TAGS")
        == b"B"
        == decode_properties(b"TAGS\x01A\x02TAGS\x01B")["TAGS"].encode()
    )


def test_append_properties() -> None:
    assert append_properties(b"A\x01x", b"W\x01true") == b"A\x01x\x02W\x01true"
    assert append_properties(b"A\x01x\x02", b"W\x01true") == b"A\x01x\x02W\x01true"
    assert append_properties(b"", b"W\x01true") == b"W\x01true"
    assert append_properties(b"A\x01x", b"") == b"A\x01x"


@pytest.mark.parametrize("bad", [{"": "v"}, {"a\x01b": "v"}, {"a\x02": "v"}, {"k": "v\x01"}, {"k": "\x02"}])
def test_encode_properties_rejects_separators(bad: dict[str, str]) -> None:
    with pytest.raises(MessageError):
        encode_properties(bad)


@st.composite
def batch_items(draw: st.DrawFn) -> tuple[list[bytes], list[bytes], list[int] | None]:
    n = draw(st.integers(0, 50))
    bodies = draw(st.lists(small_bodies, min_size=n, max_size=n))
    props = [encode_properties(p) for p in draw(st.lists(property_maps(), min_size=n, max_size=n))]
    flags = draw(st.none() | st.lists(INT32, min_size=n, max_size=n))
    return bodies, props, flags


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch_items(), st.data())
def test_batch_items_roundtrip_and_truncation(
    items: tuple[list[bytes], list[bytes], list[int] | None], data: st.DataObject
) -> None:
    bodies, props, flags = items
    encoded = encode_batch_items(bodies, props, flags)
    assert len(encoded) == sum(22 + len(b) + len(p) for b, p in zip(bodies, props, strict=True))
    decoded = decode_batch_items(encoded)
    assert len(decoded) == len(bodies)
    assert decoded.bodies == bodies
    assert decoded.properties == props
    assert decoded.flags == (flags if flags is not None else [0] * len(bodies))
    boundaries, pos = {0}, 0
    for b, p in zip(bodies, props, strict=True):
        pos += 22 + len(b) + len(p)
        boundaries.add(pos)
    inside = [c for c in range(len(encoded)) if c not in boundaries]
    if inside:
        cut = data.draw(st.sampled_from(inside))
        with pytest.raises(MessageError):
            decode_batch_items(encoded[:cut])


def test_batch_item_layout() -> None:
    item = encode_batch_items([b"hello"], [b"TAGS\x01A"], [7])
    assert item == bytes.fromhex("0000002100000000000000000000000700000005") + b"hello" + b"\x00\x06TAGS\x01A"


@pytest.mark.parametrize("patch", ["size_small", "size_big", "body_negative", "body_past_the_end", "props_len_off"])
def test_inconsistent_batch_item(patch: str) -> None:
    good = bytearray(encode_batch_items([b"hello", b"x"], [b"TAGS\x01A", b""]))
    size = 22 + 5 + 6
    if patch == "size_small":
        good[0:4] = (size - 1).to_bytes(4, "big")
    elif patch == "size_big":
        good[0:4] = (size + 1).to_bytes(4, "big")
    elif patch == "body_negative":
        good[16:20] = (-1).to_bytes(4, "big", signed=True)
    elif patch == "body_past_the_end":
        good[16:20] = (1000).to_bytes(4, "big")
    else:
        good[25:27] = (7).to_bytes(2, "big")
    with pytest.raises(MessageError):
        decode_batch_items(bytes(good))
