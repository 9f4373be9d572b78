"""The v1 CommitLog record layout against an independent reading of RocketMQ's field table.

The encoder and decoder below are written from that field table with
``struct``, field by field; they deliberately import nothing from
``sparkmq.message.layout`` or ``HEAD_DTYPE``.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, replace

import pytest

from sparkmq.errors import CorruptRecordError, InvalidTopicError, MessageTooLargeError
from sparkmq.message import (
    Host,
    MessageBatch,
    blank_filler,
    decode_columns,
    decode_offset_msg_id,
    decode_record,
    encode_properties,
    encode_records,
    iter_records,
    offset_msg_id,
    record_starts,
    validate_topic,
)
from sparkmq.message.record import encode_records_bulk, encode_records_plain

Encoder = Callable[[MessageBatch, int, int, int, int, int, Host], bytes]

MAGIC = 0xDAA320A7  # MESSAGE_MAGIC_CODE (v1)
BLANK_MAGIC = 0xCBD43194  # BLANK_MAGIC_CODE
LOCALHOST = bytes([127, 0, 0, 1])
# encode_records picks one of the other two by batch size; each must write the spec's bytes.
ENCODERS = pytest.mark.parametrize(
    "encode", [encode_records, encode_records_plain, encode_records_bulk], ids=["auto", "plain", "bulk"]
)


# --------------------------------------------------------------------------- spec codec


@dataclass(frozen=True)
class SpecRecord:
    """One record, field by field, in the order of RocketMQ's field table."""

    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_timestamp: int
    born_ip: bytes
    born_port: int
    store_timestamp: int
    store_ip: bytes
    store_port: int
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties: bytes
    total_size: int = -1  # filled in by spec_decode / spec_encode
    magic: int = MAGIC
    body_crc: int = -1  # -1: compute from the body


def spec_encode(r: SpecRecord) -> bytes:
    """Encode ``r`` field by field (IPv4 hosts: 4-byte address + int32 port)."""
    topic = r.topic.encode("utf-8")
    crc = zlib.crc32(r.body) & 0x7FFFFFFF if r.body_crc == -1 else r.body_crc
    fields = [
        struct.pack(">I", r.magic),  # 2 MAGICCODE
        struct.pack(">i", crc),  # 3 BODYCRC
        struct.pack(">i", r.queue_id),  # 4 QUEUEID
        struct.pack(">i", r.flag),  # 5 FLAG
        struct.pack(">q", r.queue_offset),  # 6 QUEUEOFFSET
        struct.pack(">q", r.physical_offset),  # 7 PHYSICALOFFSET
        struct.pack(">i", r.sys_flag),  # 8 SYSFLAG
        struct.pack(">q", r.born_timestamp),  # 9 BORNTIMESTAMP
        r.born_ip + struct.pack(">i", r.born_port),  # 10 BORNHOST
        struct.pack(">q", r.store_timestamp),  # 11 STORETIMESTAMP
        r.store_ip + struct.pack(">i", r.store_port),  # 12 STOREHOST
        struct.pack(">i", r.reconsume_times),  # 13 RECONSUMETIMES
        struct.pack(">q", r.prepared_transaction_offset),  # 14 PREPAREDTRANSACTIONOFFSET
        struct.pack(">i", len(r.body)) + r.body,  # 15 BODYLENGTH + BODY
        struct.pack(">b", len(topic)) + topic,  # 16 TOPICLENGTH (int8) + TOPIC
        struct.pack(">h", len(r.properties)) + r.properties,  # 17 PROPERTIESLENGTH (int16) + PROPERTIES
    ]
    rest = b"".join(fields)
    total = 4 + len(rest) if r.total_size == -1 else r.total_size
    return struct.pack(">i", total) + rest  # 1 TOTALSIZE


class _Cursor:
    def __init__(self, buf: bytes, pos: int) -> None:
        self.buf = buf
        self.pos = pos

    def take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def raw(self, n: int) -> bytes:
        assert self.pos + n <= len(self.buf), "field runs past the buffer"
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out


def spec_decode(buf: bytes, pos: int = 0) -> tuple[SpecRecord, int]:
    """Decode the record at ``pos`` field by field; return it and the position after it."""
    c = _Cursor(bytes(buf), pos)
    total = c.take(">i")
    magic = c.take(">I")
    crc = c.take(">i")
    queue_id = c.take(">i")
    flag = c.take(">i")
    queue_offset = c.take(">q")
    physical_offset = c.take(">q")
    sys_flag = c.take(">i")
    born_ts = c.take(">q")
    born_ip, born_port = c.raw(4), c.take(">i")
    store_ts = c.take(">q")
    store_ip, store_port = c.raw(4), c.take(">i")
    reconsume = c.take(">i")
    prepared = c.take(">q")
    body = c.raw(c.take(">i"))
    topic = c.raw(c.take(">b")).decode("utf-8")
    props = c.raw(c.take(">h"))
    record = SpecRecord(
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sys_flag,
        born_ts,
        born_ip,
        born_port,
        store_ts,
        store_ip,
        store_port,
        reconsume,
        prepared,
        body,
        topic,
        props,
        total_size=total,
        magic=magic,
        body_crc=crc,
    )
    return record, c.pos


def spec_decode_all(buf: bytes) -> list[SpecRecord]:
    out, pos = [], 0
    while pos < len(buf):
        record, end = spec_decode(buf, pos)
        assert end - pos == record.total_size, "TOTALSIZE disagrees with the field lengths"
        out.append(record)
        pos = end
    return out


def _record(**overrides: object) -> SpecRecord:
    base = SpecRecord(
        queue_id=3,
        flag=-7,
        queue_offset=41,
        physical_offset=1 << 33,
        sys_flag=0x1 | 0x8,
        born_timestamp=1_700_000_000_123,
        born_ip=bytes([192, 168, 1, 20]),
        born_port=54321,
        store_timestamp=1_700_000_000_456,
        store_ip=bytes([10, 1, 2, 3]),
        store_port=10911,
        reconsume_times=2,
        prepared_transaction_offset=123456789,
        body=b"payload \x00\xff bytes",
        topic="Topic_A-1",
        properties=b"KEYS\x01k1 k2\x02TAGS\x01TagA",
    )
    return replace(base, **overrides)


def _ip(column_value: object) -> bytes:
    # numpy "S4" items drop trailing NUL bytes (10.0.0.0 -> b"\n"); pad back to 4 bytes.
    return bytes(column_value).ljust(4, b"\x00")


# A body whose CRC32 has the top bit set, so the & 0x7FFFFFFF mask matters.
HIGH_CRC_BODY = next(b for i in range(1000) if zlib.crc32(b := f"body-{i}".encode()) & 0x80000000)


# --------------------------------------------------------------------------- (a) sparkmq encode, spec decode


def _sample_batch() -> MessageBatch:
    bodies = [b"", b"x", HIGH_CRC_BODY, bytes(range(256)) * 5, "héllo wörld".encode()]
    props = [
        b"",
        b"TAGS\x01A",
        encode_properties({"KEYS": "a b c", "UNIQ_KEY": "0" * 32}),
        b"K\x01v\x02",
        b"W\x01\xc3\xa9",
    ]
    return MessageBatch(
        "%RETRY%group_1|x-y",
        6,
        bodies,
        props,
        flags=[0, 1, -1, 2**31 - 1, -(2**31)],
        sys_flag=0x1 | 0x2,
        born_timestamp=1_699_999_999_999,
        born_host=Host(bytes([192, 168, 0, 7]), 40001),
        reconsume_times=3,
        prepared_transaction_offset=77,
    )


@ENCODERS
def test_sparkmq_records_decode_field_by_field(encode: Encoder) -> None:
    batch = _sample_batch()
    store = Host(bytes([10, 0, 0, 9]), 10911)
    buf = encode(batch, 0, len(batch), 100, 5000, 1_700_000_000_000, store)
    records = spec_decode_all(buf)
    assert len(records) == len(batch)
    expected_physical = 5000
    for i, r in enumerate(records):
        body, props = batch.bodies[i], batch.properties[i]
        assert r.total_size == 91 + len(body) + len(batch.topic) + len(props)
        assert r.magic == MAGIC
        assert r.body_crc == zlib.crc32(body) & 0x7FFFFFFF
        assert r.queue_id == 6
        assert r.flag == batch.flags[i]
        assert r.queue_offset == 100 + i
        assert r.physical_offset == expected_physical
        assert r.sys_flag == 0x3
        assert r.born_timestamp == 1_699_999_999_999
        assert (r.born_ip, r.born_port) == (bytes([192, 168, 0, 7]), 40001)
        assert r.store_timestamp == 1_700_000_000_000
        assert (r.store_ip, r.store_port) == (bytes([10, 0, 0, 9]), 10911)
        assert r.reconsume_times == 3
        assert r.prepared_transaction_offset == 77
        assert r.body == body
        assert r.topic == "%RETRY%group_1|x-y"
        assert r.properties == props
        expected_physical += r.total_size
    assert expected_physical == 5000 + len(buf)


@ENCODERS
def test_body_crc_is_masked_to_31_bits(encode: Encoder) -> None:
    assert zlib.crc32(HIGH_CRC_BODY) & 0x80000000
    batch = MessageBatch("T", 0, [HIGH_CRC_BODY], [b""])
    (r,) = spec_decode_all(encode(batch, 0, 1, 0, 0, 0, Host(LOCALHOST, 1)))
    assert r.body_crc == zlib.crc32(HIGH_CRC_BODY) - 0x80000000
    assert r.body_crc >= 0


@ENCODERS
def test_java_fixed_positions(encode: Encoder) -> None:
    """MESSAGE_MAGIC_CODE_POSTION 4, FLAG 16, QUEUE_OFFSET 20, PHYSIC_OFFSET 28, SYSFLAG 36, STORETIMESTAMP 56."""
    batch = MessageBatch("T", 2, [b"abc"], [b""], flags=[0x0BADCAFE], sys_flag=0x8, born_timestamp=11)
    rec = encode(batch, 0, 1, 0x0102030405, 0x0A0B0C0D0E, 0x0F0E0D0C0B, Host(LOCALHOST, 10911))
    assert rec[4:8] == bytes.fromhex("daa320a7")
    assert struct.unpack_from(">i", rec, 16)[0] == 0x0BADCAFE
    assert struct.unpack_from(">q", rec, 20)[0] == 0x0102030405
    assert struct.unpack_from(">q", rec, 28)[0] == 0x0A0B0C0D0E
    assert struct.unpack_from(">i", rec, 36)[0] == 0x8
    assert struct.unpack_from(">q", rec, 56)[0] == 0x0F0E0D0C0B
    assert len(rec) == 91 + 3 + 1 + 0


@ENCODERS
def test_encode_a_slice_of_a_batch(encode: Encoder) -> None:
    batch = _sample_batch()
    buf = encode(batch, 2, 4, 900, 64, 5, Host(LOCALHOST, 1))
    records = spec_decode_all(buf)
    assert [r.body for r in records] == list(batch.bodies[2:4])
    assert [r.properties for r in records] == list(batch.properties[2:4])
    assert [r.flag for r in records] == list(batch.flags[2:4])
    assert [r.queue_offset for r in records] == [900, 901]
    assert [r.physical_offset for r in records] == [64, 64 + records[0].total_size]
    assert encode(batch, 3, 3, 0, 0, 0, Host(LOCALHOST, 1)) == b""


@ENCODERS
def test_flags_default_to_zero_and_topic_of_127_bytes(encode: Encoder) -> None:
    topic = "t" * 127
    batch = MessageBatch(topic, 0, [b"a", b"b"], [b"", b""])
    records = spec_decode_all(encode(batch, 0, 2, 0, 0, 0, Host(LOCALHOST, 1)))
    assert [r.flag for r in records] == [0, 0]
    assert [r.topic for r in records] == [topic, topic]


# --------------------------------------------------------------------------- (b) spec encode, sparkmq decode


def _spec_buffer() -> tuple[list[SpecRecord], bytes]:
    records = [
        _record(),
        _record(body=b"", properties=b"", topic="x", queue_offset=0, flag=0, sys_flag=0),
        _record(
            body=HIGH_CRC_BODY * 100,
            born_ip=bytes([10, 0, 0, 0]),
            store_ip=bytes([0, 0, 0, 0]),
            queue_offset=2**40,
            prepared_transaction_offset=0,
            reconsume_times=16,
        ),
        _record(topic="T" * 127, properties="K\x01ünïcödé\x02".encode(), born_timestamp=-1),
    ]
    parts, pos = [], 0
    for i, r in enumerate(records):
        records[i] = r = replace(r, physical_offset=pos)
        encoded = spec_encode(r)
        records[i] = replace(r, total_size=len(encoded))
        parts.append(encoded)
        pos += len(encoded)
    return records, b"".join(parts)


def _assert_message_matches(m: object, r: SpecRecord) -> None:
    assert m.total_size == r.total_size
    assert m.body_crc == zlib.crc32(r.body) & 0x7FFFFFFF
    for name in (
        "queue_id",
        "flag",
        "queue_offset",
        "physical_offset",
        "sys_flag",
        "born_timestamp",
        "store_timestamp",
        "reconsume_times",
        "prepared_transaction_offset",
        "topic",
    ):
        assert getattr(m, name) == getattr(r, name), name
    assert m.born_host == Host(r.born_ip, r.born_port)
    assert m.store_host == Host(r.store_ip, r.store_port)
    assert bytes(m.body) == r.body
    assert m.properties_raw == r.properties


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview], ids=["bytes", "bytearray", "memoryview"])
def test_decode_record_and_iter_records_read_spec_records(wrap: type) -> None:
    records, buf = _spec_buffer()
    data = wrap(buf)
    messages = list(iter_records(data, check_crc=True))
    assert len(messages) == len(records)
    for m, r in zip(messages, records, strict=True):
        _assert_message_matches(m, r)
        _assert_message_matches(decode_record(data, r.physical_offset, check_crc=True), r)
    assert record_starts(data).tolist() == [r.physical_offset for r in records]
    assert messages[2].store_host.ip == bytes(4)
    assert str(messages[0].born_host) == "192.168.1.20:54321"


def test_decode_columns_reads_spec_records() -> None:
    records, buf = _spec_buffer()
    for cols in (decode_columns(buf), decode_columns(memoryview(buf), record_starts(buf))):
        assert len(cols) == len(records)
        h = cols.heads
        assert h["total_size"].tolist() == [r.total_size for r in records]
        assert h["magic"].tolist() == [MAGIC - 2**32] * len(records)
        assert h["body_crc"].tolist() == [zlib.crc32(r.body) & 0x7FFFFFFF for r in records]
        for name in (
            "queue_id",
            "flag",
            "queue_offset",
            "physical_offset",
            "sys_flag",
            "born_timestamp",
            "store_timestamp",
            "reconsume_times",
            "prepared_transaction_offset",
        ):
            assert h[name].tolist() == [getattr(r, name) for r in records], name
        assert [_ip(v) for v in h["born_ip"]] == [r.born_ip for r in records]
        assert [_ip(v) for v in h["store_ip"]] == [r.store_ip for r in records]
        assert h["born_port"].tolist() == [r.born_port for r in records]
        assert h["store_port"].tolist() == [r.store_port for r in records]
        assert h["body_length"].tolist() == [len(r.body) for r in records]
        assert cols.starts.tolist() == [r.physical_offset for r in records]
        for i, r in enumerate(records):
            assert bytes(cols.body(i)) == r.body
            b0, p0, t0 = int(cols.body_starts[i]), int(cols.properties_starts[i]), int(cols.topic_starts[i])
            assert buf[b0 : b0 + int(cols.body_lengths[i])] == r.body
            assert buf[t0 : t0 + int(cols.topic_lengths[i])].decode() == r.topic
            assert buf[p0 : p0 + int(cols.properties_lengths[i])] == r.properties
            _assert_message_matches(cols.message(i), r)


def test_decode_columns_of_an_empty_buffer() -> None:
    cols = decode_columns(b"")
    assert len(cols) == 0 and len(cols.heads) == 0
    assert list(iter_records(b"")) == []


# --------------------------------------------------------------------------- (c) annotated example record

# The first 128 bytes (0x00..0x7f) of a record in the Java layout that the real C++ 1.2.3 and ali-ons clients
# decoded correctly: topic TopicTest, queue 1, queueOffset 5, physical offset 1024, body 'hello'.
EXAMPLE_DUMP = bytes.fromhex(
    "000000ae"
    "daa320a7"
    "3610a686"
    "00000001"
    "00000000"
    "0000000000000005"
    "00000000"
    "00000400"
    "00000000"
    "0000018bcfe56800"
    "7f000001"
    "0000d431"
    "0000018bcfe5687b"
    "7f000001"
    "00002a9f"
    "00000000"
    "00000000"
    "00000000"
    "00000005"
    "68656c6c6f"
    "09"
    "546f"
    "70696354657374"
    "0045"
    "4b45595301"
    "4b31"
    "02"
    "5441475301"
    "54616741"
    "02"
    "554e49515f"
)
EXAMPLE_UNIQ = "7F0000010000D431000000000000ABCD"  # any 32 characters make PROPLEN 69
EXAMPLE_PROPS = f"KEYS\x01K1\x02TAGS\x01TagA\x02UNIQ_KEY\x01{EXAMPLE_UNIQ}\x02WAIT\x01true".encode()


def test_example_dump_transcription() -> None:
    assert len(EXAMPLE_DUMP) == 0x80
    assert len(EXAMPLE_PROPS) == 69
    assert zlib.crc32(b"hello") == 0x3610A686


def _example_sparkmq() -> bytes:
    batch = MessageBatch(
        "TopicTest",
        1,
        [b"hello"],
        [EXAMPLE_PROPS],
        born_timestamp=0x18BCFE56800,
        born_host=Host(LOCALHOST, 54321),
    )
    return encode_records(batch, 0, 1, 5, 1024, 0x18BCFE5687B, Host(LOCALHOST, 10911))


def test_annotated_example_sparkmq_encoder() -> None:
    rec = _example_sparkmq()
    assert len(rec) == 174 == 0xAE
    assert rec[:0x80] == EXAMPLE_DUMP
    assert rec[0x67:0x69] == b"\x00\x45"  # PROPLEN = 69
    assert rec[0x69:] == EXAMPLE_PROPS  # the properties run to the end of the 174-byte record


def test_annotated_example_spec_encoder_and_decoders() -> None:
    spec = spec_encode(
        SpecRecord(
            queue_id=1,
            flag=0,
            queue_offset=5,
            physical_offset=1024,
            sys_flag=0,
            born_timestamp=0x18BCFE56800,
            born_ip=LOCALHOST,
            born_port=54321,
            store_timestamp=0x18BCFE5687B,
            store_ip=LOCALHOST,
            store_port=10911,
            reconsume_times=0,
            prepared_transaction_offset=0,
            body=b"hello",
            topic="TopicTest",
            properties=EXAMPLE_PROPS,
        )
    )
    assert spec == _example_sparkmq()
    m = decode_record(spec, check_crc=True)
    assert (m.topic, m.queue_id, m.queue_offset, m.physical_offset, bytes(m.body)) == (
        "TopicTest",
        1,
        5,
        1024,
        b"hello",
    )
    assert str(m.born_host) == "127.0.0.1:54321" and str(m.store_host) == "127.0.0.1:10911"
    assert m.properties == {"KEYS": "K1", "TAGS": "TagA", "UNIQ_KEY": EXAMPLE_UNIQ, "WAIT": "true"}
    assert m.offset_msg_id == "7F00000100002A9F0000000000000400"


# --------------------------------------------------------------------------- (d) offset msgId example


def test_offset_msg_id_example() -> None:
    assert offset_msg_id(LOCALHOST, 10911, 1024) == "7F00000100002A9F0000000000000400"
    assert decode_offset_msg_id("7F00000100002A9F0000000000000400") == ("127.0.0.1", 10911, 1024)
    # same bytes the C++ encoder writes: ip(4) | 0x0000 | port(2) | offset(8)
    cpp = LOCALHOST + b"\x00\x00" + struct.pack(">H", 10911) + struct.pack(">q", 1024)
    assert cpp.hex().upper() == "7F00000100002A9F0000000000000400"


# --------------------------------------------------------------------------- (e) BLANK filler


@pytest.mark.parametrize("remaining", [8, 9, 173, 1 << 20, 2**31 - 1])
def test_blank_filler_bytes(remaining: int) -> None:
    filler = blank_filler(remaining)
    assert len(filler) == 8
    assert filler == struct.pack(">iI", remaining, BLANK_MAGIC)
    assert filler[4:] == bytes.fromhex("cbd43194")


def test_blank_filler_is_not_decoded_as_a_message() -> None:
    region = blank_filler(200) + bytes(192)  # the rest of a fresh file is zeros
    with pytest.raises(CorruptRecordError):
        decode_record(region)
    with pytest.raises(CorruptRecordError):
        decode_columns(region)


# --------------------------------------------------------------------------- (f) errors


def _good() -> bytes:
    return spec_encode(_record())


def _all_decoders(buf: bytes) -> list[object]:
    return [
        lambda: decode_record(buf),
        lambda: list(iter_records(buf)),
        lambda: decode_columns(buf),
    ]


@pytest.mark.parametrize("magic", [0, BLANK_MAGIC, 0xDAA320AB, MAGIC ^ 1])
def test_bad_magic(magic: int) -> None:
    buf = spec_encode(_record(magic=magic))
    for decode in _all_decoders(buf):
        with pytest.raises(CorruptRecordError):
            decode()


def test_truncated_record_at_every_length() -> None:
    good = _good()
    for cut in range(1, len(good)):
        for decode in _all_decoders(good[:cut]):
            with pytest.raises(CorruptRecordError):
                decode()


def test_second_record_truncated() -> None:
    good = _good()
    buf = good + good[:-3]
    it = iter_records(buf)
    assert next(it).total_size == len(good)
    with pytest.raises(CorruptRecordError):
        next(it)
    with pytest.raises(CorruptRecordError):
        decode_columns(buf)


@pytest.mark.parametrize("delta", [-1, 1, 7])
def test_totalsize_inconsistent_with_field_lengths(delta: int) -> None:
    good = _good()
    buf = spec_encode(_record(total_size=len(good) + delta)) + bytes(max(delta, 0))
    for decode in _all_decoders(buf):
        with pytest.raises(CorruptRecordError):
            decode()


def _patch(buf: bytes, at: int, fmt: str, value: int) -> bytes:
    out = bytearray(buf)
    struct.pack_into(fmt, out, at, value)
    return bytes(out)


@pytest.mark.parametrize(
    "field",
    [
        "body_len+1",
        "body_len-1",
        "body_len_negative",
        "topic_len+1",
        "topic_len-1",
        "topic_len_huge",
        "props_len+1",
        "props_len-1",
        "props_len_negative",
    ],
)
def test_inner_lengths_inconsistent(field: str) -> None:
    r = _record()
    good = spec_encode(r)
    body_len_at = 84
    topic_len_at = 88 + len(r.body)
    props_len_at = topic_len_at + 1 + len(r.topic)
    buf = {
        "body_len+1": _patch(good, body_len_at, ">i", len(r.body) + 1),
        "body_len-1": _patch(good, body_len_at, ">i", len(r.body) - 1),
        "body_len_negative": _patch(good, body_len_at, ">i", -5),
        "topic_len+1": _patch(good, topic_len_at, ">B", len(r.topic) + 1),
        "topic_len-1": _patch(good, topic_len_at, ">B", len(r.topic) - 1),
        "topic_len_huge": _patch(good, topic_len_at, ">B", 200),
        "props_len+1": _patch(good, props_len_at, ">h", len(r.properties) + 1),
        "props_len-1": _patch(good, props_len_at, ">h", len(r.properties) - 1),
        "props_len_negative": _patch(good, props_len_at, ">h", -1),
    }[field]
    for decode in _all_decoders(buf):
        with pytest.raises(CorruptRecordError):
            decode()


def test_topic_that_is_not_utf8_is_a_corrupt_record() -> None:
    r = _record(topic="ab")
    buf = bytearray(spec_encode(r))
    buf[88 + len(r.body) + 1] = 0xFF
    with pytest.raises(CorruptRecordError):
        decode_record(bytes(buf))


def test_crc_mismatch_detected_only_when_asked() -> None:
    r = _record()
    bad = spec_encode(replace(r, body_crc=(zlib.crc32(r.body) & 0x7FFFFFFF) ^ 1))
    assert bytes(decode_record(bad).body) == r.body  # clients do not check CRC by default
    with pytest.raises(CorruptRecordError):
        decode_record(bad, check_crc=True)
    with pytest.raises(CorruptRecordError):
        list(iter_records(_good() + bad, check_crc=True))
    flipped = bytearray(_good())
    flipped[90] ^= 0x40  # a body byte
    with pytest.raises(CorruptRecordError):
        decode_record(bytes(flipped), check_crc=True)


@pytest.mark.parametrize("sys_flag", [0x10, 0x20, 0x30])
def test_ipv6_host_flags_are_never_decoded_as_ipv4(sys_flag: int) -> None:
    with pytest.raises(CorruptRecordError):
        decode_record(spec_encode(_record(sys_flag=sys_flag)))


def test_decode_at_a_position() -> None:
    good = _good()
    buf = b"\x00" * 13 + good
    assert decode_record(buf, 13).total_size == len(good)
    with pytest.raises(CorruptRecordError):
        decode_record(buf, 12)


@pytest.mark.parametrize("topic", ["T" * 128, "é" * 64, "x" * 300])
def test_topic_over_127_bytes(topic: str) -> None:
    with pytest.raises(InvalidTopicError):
        validate_topic(topic)
    with pytest.raises(InvalidTopicError):
        encode_records(MessageBatch(topic, 0, [b"a"], [b""]), 0, 1, 0, 0, 0, Host(LOCALHOST, 1))


@pytest.mark.parametrize("topic", ["", "Topic Test", "a/b", "tópico", "a.b", "a\x00b", "topic#1", "中文"])
def test_topic_charset(topic: str) -> None:
    with pytest.raises(InvalidTopicError):
        validate_topic(topic)
    with pytest.raises(InvalidTopicError):
        MessageBatch(topic, 0, [b"a"], [b""]).check_sizes(1 << 22)


def test_valid_topics() -> None:
    for topic in ["%RETRY%group", "%DLQ%g", "a|b", "A-Z_0-9", "x", "T" * 127]:
        assert validate_topic(topic) == topic.encode()


@ENCODERS
def test_properties_limit(encode: Encoder) -> None:
    ok = MessageBatch("T", 0, [b""], [b"p" * 32767])
    (r,) = spec_decode_all(encode(ok, 0, 1, 0, 0, 0, Host(LOCALHOST, 1)))
    assert len(r.properties) == 32767
    too_big = MessageBatch("T", 0, [b"", b""], [b"", b"p" * 32768])
    with pytest.raises(MessageTooLargeError):
        encode(too_big, 0, 2, 0, 0, 0, Host(LOCALHOST, 1))
    with pytest.raises(MessageTooLargeError):
        encode_properties({"K": "v" * 32766})  # 1 + 1 + 32766 = 32768 bytes
    assert len(encode_properties({"K": "v" * 32765})) == 32767


def test_check_sizes() -> None:
    batch = MessageBatch("Topic", 0, [b"a" * 10, b"b" * 100, b""], [b"", b"P\x01v", b""])
    biggest = 91 + len("Topic") + 100 + 3
    assert batch.sizes.tolist() == [91 + 5 + 10, biggest, 91 + 5]
    batch.check_sizes(biggest)
    with pytest.raises(MessageTooLargeError, match="message 1"):
        batch.check_sizes(biggest - 1)
    MessageBatch("Topic", 0, [], []).check_sizes(0)
