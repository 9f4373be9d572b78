"""The clients' fast paths against their plain references, on exact bytes (no broker needed).

* ``SendTemplate`` renders the frames ``RemotingCommand`` encodes from ``SendMessageRequestHeaderV2``.
* ``decode_pull_body`` (columnar, lazy messages) reads what ``iter_records`` reads, on both its
  plain (few records) and numpy (many records) paths.
"""

from __future__ import annotations

import pickle
import zlib
from json.encoder import encode_basestring

import pytest

from sparkmq.client.message import Message, SendResult, SendStatus
from sparkmq.client.received import PLAIN_DECODE_MAX, ReceivedMessage, decode_pull_body
from sparkmq.client.send_frames import SendTemplate
from sparkmq.errors import CorruptRecordError, FrameTooLargeError
from sparkmq.message import layout as L
from sparkmq.message.msgid import UniqueIdGenerator, offset_msg_id
from sparkmq.message.properties import decode_properties, encode_properties
from sparkmq.message.record import Host, MessageBatch, encode_records, iter_records
from sparkmq.protocol import RemotingCommand, RequestCode
from sparkmq.protocol.frame import decode_frame
from sparkmq.protocol.headers import SendMessageRequestHeaderV2


@pytest.mark.parametrize(
    ("code", "props", "sys_flag", "flag", "oneway"),
    [
        (RequestCode.SEND_MESSAGE_V2, "WAIT\x01true\x02UNIQ_KEY\x01AB12", 0, 0, False),
        (RequestCode.SEND_MESSAGE_V2, 'TAGS\x01"q"\\\x02KEYS\x01k1 k2\x02x\x01ü€\x02WAIT\x01false', 5, -7, True),
        (RequestCode.SEND_BATCH_MESSAGE, "", 0, 0, False),
    ],
)
def test_send_template_frame_equals_remoting_command(
    code: int, props: str, sys_flag: int, flag: int, oneway: bool
) -> None:
    body = b"\x00body\xff"
    template = SendTemplate('P"ID\\é', "Topic_1")
    for queue_id in (3, 3, 0):  # the second use of a queue comes from the cache
        frame = template.frame(
            code, queue_id, 41, 1_700_000_000_123, encode_basestring(props), body, sys_flag, flag, oneway
        )
        header = SendMessageRequestHeaderV2(
            'P"ID\\é',
            "Topic_1",
            "TBW102",
            4,
            queue_id,
            sys_flag,
            1_700_000_000_123,
            flag,
            props,
            0,
            False,
            None,
            code == RequestCode.SEND_BATCH_MESSAGE,
        )
        reference = RemotingCommand.request(code, 41, ext_fields=header.to_fields(), body=body, oneway=oneway)
        assert frame == reference.encode()
        assert decode_frame(frame) == reference


def test_send_template_refuses_a_frame_over_the_maximum() -> None:
    with pytest.raises(FrameTooLargeError):
        SendTemplate("P", "T").frame(RequestCode.SEND_MESSAGE_V2, 0, 1, 0, '""', bytes(16 * 1024 * 1024), 0, 0)


@pytest.mark.parametrize(
    "message",
    [
        Message("T", b"x"),
        Message("T", b"x", wait_store_ok=False),
        Message("T", "text", tags="A", keys="k1 k2"),
        Message("T", b"x", properties={"a": "1"}, delay_level=3),
    ],
)
def test_properties_text_equals_the_encoded_map(message: Message) -> None:
    expected = {**message.properties}
    if message.tags:
        expected["TAGS"] = message.tags
    if message.keys:
        expected["KEYS"] = " ".join(message.keys)
    if message.delay_level:
        expected["DELAY"] = str(message.delay_level)
    expected |= {"WAIT": "true" if message.wait_store_ok else "false", "UNIQ_KEY": "U1"}
    assert message.properties_text("U1") == encode_properties(expected).decode()


def test_a_send_result_reads_its_answers_decimal_offset_as_the_int_it_is() -> None:
    """A producer's answer leaves the queueOffset text to the first read: the result is the one made with the int."""
    made = SendResult(SendStatus.SEND_OK, "ID", "OFFSET", None, 1234567)  # type: ignore[arg-type]
    lazy = object.__new__(SendResult)
    lazy._status, lazy._msg_id, lazy._id_tail = SendStatus.SEND_OK, "ID", -1
    lazy._offset_msg_id, lazy._queue_offset, lazy._queue = "OFFSET", "1234567", None
    assert hash(lazy) == hash(made) and lazy == made and repr(lazy) == repr(made)
    assert lazy.queue_offset == 1234567 and type(lazy.queue_offset) is int


def test_unique_ids_are_distinct_hex_of_the_java_shape() -> None:
    ids = UniqueIdGenerator(b"\x0a\x00\x00\x07")
    made = [ids.next_id() for _ in range(500)] + ids.next_ids(500)
    assert len(set(made)) == 1000
    assert all(len(i) == 32 and i == i.upper() and bytes.fromhex(i)[:4] == b"\x0a\x00\x00\x07" for i in made)


def _pull_body(count: int, topics: tuple[str, ...] = ("TopicA",)) -> bytes:
    parts, position = [], 1000
    for i in range(count):
        topic = topics[i % len(topics)]
        body = f"message {i} ".encode() * (i % 5)
        sys_flag = 0
        if i % 7 == 3:
            body, sys_flag = zlib.compress(body), L.COMPRESSED_FLAG
        props = encode_properties(
            {"UNIQ_KEY": f"U{i:04d}", "TAGS": f"t{i % 3}", "KEYS": "a b"} if i % 4 else {"x": "y"}
        )
        batch = MessageBatch(
            topic,
            i % 3,
            [body],
            [props],
            [i * 11],
            sys_flag,
            1_700_000_000_000 + i,
            Host(bytes([10, 0, 0, i % 256]), 5000 + i),
            i % 2,
        )
        record = encode_records(batch, 0, 1, 100 + i, position, 1_700_000_001_000 + i, Host(b"\x7f\x00\x00\x01", 10911))
        parts.append(record)
        position += len(record)
    return b"".join(parts)


def _reference(body: bytes, broker: str) -> list[tuple[object, ...]]:
    rows = []
    for r in iter_records(body):
        payload = zlib.decompress(r.body) if r.sys_flag & L.COMPRESSED_FLAG else bytes(r.body)
        props = decode_properties(r.properties_raw)
        offset_id = offset_msg_id(r.store_host.ip, r.store_host.port, r.physical_offset)
        rows.append(
            (
                r.topic,
                payload,
                (r.topic, broker, r.queue_id),
                r.queue_offset,
                r.physical_offset,
                props.get("UNIQ_KEY", offset_id),
                offset_id,
                props,
                r.born_timestamp,
                r.store_timestamp,
                str(r.born_host),
                str(r.store_host),
                r.reconsume_times,
                r.sys_flag,
                r.flag,
                props.get("TAGS"),
                [k for k in props.get("KEYS", "").split(" ") if k],
            )
        )
    return rows


def _fields(m: ReceivedMessage) -> tuple[object, ...]:
    q = m.queue
    return (
        m.topic,
        m.body,
        (q.topic, q.broker_name, q.queue_id),
        m.queue_offset,
        m.commit_log_offset,
        m.msg_id,
        m.offset_msg_id,
        m.properties,
        m.born_timestamp,
        m.store_timestamp,
        m.born_host,
        m.store_host,
        m.reconsume_times,
        m.sys_flag,
        m.flag,
        m.tags,
        m.keys,
    )


@pytest.mark.parametrize("count", [1, PLAIN_DECODE_MAX, PLAIN_DECODE_MAX + 1, 300])
@pytest.mark.parametrize("topics", [("TopicA",), ("TopicA", "TopicB"), ("TopicA", "TopicAB")])
def test_decode_pull_body_reads_what_iter_records_reads(count: int, topics: tuple[str, ...]) -> None:
    body = _pull_body(count, topics)
    messages = decode_pull_body(body, "broker-a")
    assert [_fields(m) for m in messages] == _reference(body, "broker-a")
    again = decode_pull_body(body, "broker-a")
    assert messages == again and messages[0] != again[-1] or count == 1
    copy = pickle.loads(pickle.dumps(messages[-1]))
    assert _fields(copy) == _fields(messages[-1])
    assert "queue_offset" in repr(messages[0])


def test_received_message_of_one_stored_record() -> None:
    body = _pull_body(4)
    for stored, expected in zip(iter_records(body), _reference(body, "b"), strict=True):
        assert _fields(ReceivedMessage.of(stored, "b")) == expected


@pytest.mark.parametrize("count", [3, 40])
def test_decode_pull_body_refuses_a_corrupt_record(count: int) -> None:
    body = bytearray(_pull_body(count))
    body[4:8] = b"\x00\x00\x00\x00"  # the first record's magic code
    with pytest.raises(CorruptRecordError):
        decode_pull_body(bytes(body), "b")
    with pytest.raises(CorruptRecordError):
        decode_pull_body(bytes(_pull_body(count))[:-1], "b")
    assert decode_pull_body(b"", "b") == []
