"""The Python reference of the native send lane, for the tests of tests/native/: what the usual
path makes of the same frames (records, dispatch columns, responses), built from the package's
own Python encoders."""

from __future__ import annotations

import functools
import importlib
import json
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from sparkmq.broker.processors.send_lane import response_template
from sparkmq.broker.topics import check_sendable
from sparkmq.errors import InvalidTopicError
from sparkmq.message.batch import decode_batch_items, encode_batch_items
from sparkmq.message.msgid import offset_msg_ids
from sparkmq.message.properties import append_properties
from sparkmq.message.record import Host, MessageBatch, encode_records_plain
from sparkmq.protocol import RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.frame import FrameDecoder
from sparkmq.protocol.headers import parse_send_request_header, send_response_fields
from sparkmq.store.consume_queue import encode_units_plain
from sparkmq.store.dispatch import TagsCoder, dispatch_for_group

BORN = Host(b"\x7f\x00\x00\x01", 50123)
STORE = Host(b"\x0a\x00\x00\x02", 10911)
MAX_FRAME = 16 * 1024 * 1024
MAX_MESSAGE = 4 * 1024 * 1024
PARTS = response_template("R", True)

#: A SEND_MESSAGE header the real C++ client (PyPI rocketmq 0.4.4) sent to a sparkmq broker
#: (2026-11-23, captured off the broker's read buffer), body b"hello"; jsoncpp's key order and newline.
CPP_044_SEND = (
    b'{"code":10,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","Signature":"LTCT5pxLoqOy5oNOGGXFiCRgDi0=",'
    b'"batch":"0","bornTimestamp":"1795470377410","defaultTopic":"TBW102","defaultTopicQueueNums":4,"flag":0,'
    b'"producerGroup":"PID_CAP","properties":"KEYS\\u0001k1 k2\\u0002TAGS\\u0001TagA\\u0002UNIQ_KEY\\u0001'
    b'0100007F0000E0C900004224557B0100\\u0002WAIT\\u0001true\\u0002color\\u0001red\\u0002","queueId":0,'
    b'"reconsumeTimes":"0","sysFlag":0,"topic":"CapTopic","unitMode":"0"},"flag":0,"language":"CPP","opaque":2,'
    b'"remark":"","version":63}\n'
)


def send_frame(
    opaque: int,
    *,
    topic: str = "TopicA",
    queue_id: str = "0",
    body: bytes = b"body",
    properties: str | None = "WAIT\x01true\x02UNIQ_KEY\x01ABC",
    sys_flag: str = "0",
    flag: str = "0",
    born: str = "1700000000000",
    reconsume: str | None = "0",
    extra: dict[str, str] | None = None,
    code: int = RequestCode.SEND_MESSAGE_V2,
) -> bytes:
    """A SEND_MESSAGE_V2 frame as sparkmq's RemotingCommand encodes it."""
    fields = {"a": "PID", "b": topic, "c": "TBW102", "d": "4", "e": queue_id, "f": sys_flag, "g": born, "h": flag}
    if properties is not None:
        fields["i"] = properties
    if reconsume is not None:
        fields["j"] = reconsume
    fields.update({"k": "false", "m": "false"})
    fields.update(extra or {})
    return RemotingCommand.request(code, opaque, ext_fields=fields, body=body).encode()


def batch_frame(
    opaque: int,
    items: list[tuple[bytes, bytes, int]],
    *,
    properties: str | None = "WAIT\x01true\x02",
    **fields: Any,
) -> bytes:
    """A SEND_BATCH_MESSAGE frame as the Java client sends one: a V2 header with batch true (``fields`` as
    ``send_frame``'s) over the (body, properties, flag) items."""
    bodies, props, flags = (list(column) for column in zip(*items, strict=True)) if items else ([], [], [])
    body = encode_batch_items(bodies, props, flags)
    extra = {"m": "true", **fields.pop("extra", {})}
    return send_frame(
        opaque, properties=properties, body=body, code=RequestCode.SEND_BATCH_MESSAGE, extra=extra, **fields
    )


def raw_frame(header: bytes, body: bytes = b"") -> bytes:
    """A request frame with ``header`` written verbatim (JSON, type byte 0)."""
    return (4 + len(header) + len(body)).to_bytes(4) + len(header).to_bytes(4) + header + body


def v1_frame(
    opaque: int,
    ext: dict[str, Any],
    body: bytes = b"body",
    *,
    top: dict[str, Any] | None = None,
    order: list[str] | None = None,
    ascii_only: bool = True,
    tail: str = "\n",
    separators: tuple[str, str] = (",", ":"),
) -> bytes:
    """A SEND_MESSAGE (10) frame as the C++ client writes one: ``ext`` (values of any JSON type) under
    the header keys jsoncpp writes (``top`` overrides or adds; a None value drops the key), in ``order``
    (default: sorted, as jsoncpp), the header followed by ``tail``; ext in its own order."""
    header: dict[str, Any] = {"code": 10, "extFields": ext, "flag": 0, "language": "CPP", "opaque": opaque}
    header.update({"remark": "", "version": 63})
    for key, value in (top or {}).items():
        if value is None:
            header.pop(key, None)
        else:
            header[key] = value
    keys = sorted(header) if order is None else [k for k in order if k in header]
    dump = functools.partial(json.dumps, ensure_ascii=ascii_only, separators=separators)
    text = "{" + separators[0].join(f"{dump(k)}{separators[1]}{dump(header[k])}" for k in keys) + "}"
    return raw_frame((text + tail).encode(), body)


def cpp_fields(topic: str = "TopicA", **changes: Any) -> dict[str, Any]:
    """The extFields of a C++ client's single send (numbers where it writes numbers); ``changes`` set
    or (None) drop keys."""
    fields: dict[str, Any] = {
        "AccessKey": "",
        "OnsChannel": "ALIYUN",
        "Signature": "LTCT5pxLoqOy5oNOGGXFiCRgDi0=",
        "batch": "0",
        "bornTimestamp": "1795470377410",
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": 4,
        "flag": 0,
        "producerGroup": "PID_CPP",
        "properties": "UNIQ_KEY\x01U1\x02WAIT\x01true\x02",
        "queueId": 0,
        "reconsumeTimes": "0",
        "sysFlag": 0,
        "topic": topic,
        "unitMode": "0",
    }
    for key, value in changes.items():
        if value is None:
            fields.pop(key, None)
        else:
            fields[key] = value
    return fields


def scan(buffer: bytes | bytearray, limit: int = 1024, max_message: int = MAX_MESSAGE) -> Any:
    """``_sendlane.scan`` of ``buffer`` from 0 with the test hosts."""
    native = importlib.import_module("sparkmq.native._sendlane")
    return native.scan(buffer, 0, limit, MAX_FRAME, max_message, BORN.ip, BORN.port, STORE.ip, STORE.port)


def check_parity(
    frames: list[bytes], taken: int, physical_start: int = 4096, store_timestamp: int = 1_700_000_000_123
) -> None:
    """The lane took exactly the first ``taken`` frames, and made of them what the reference makes."""
    buffer = bytearray(b"".join(frames))
    group = scan(buffer)
    if taken == 0:
        assert group is None
        return
    assert group is not None
    assert (group.count, group.end) == (taken, sum(map(len, frames[:taken])))
    ref_bases = {key: 7 * i for i, key in enumerate(dict.fromkeys(group.keys))}
    expected = reference(frames[:taken], physical_start, store_timestamp, ref_bases)
    assert group.code == expected.code
    assert group.keys == expected.keys
    assert group.topic_stats == expected.topic_stats
    records = group.place(physical_start, store_timestamp, [ref_bases[key] for key in group.keys])
    assert records == expected.records
    assert group.record_bytes == len(records)
    assert group.queue_units() == [
        (encode_units_plain(physical, sizes, codes), physical[-1] + sizes[-1])
        for physical, sizes, codes in expected.queues
    ]
    assert group.index_entries() == (expected.index_hashes, expected.index_offsets)
    assert PARTS is not None
    assert group.responses(PARTS, STORE.ip, STORE.port) == expected.responses


@dataclass
class Reference:
    """What the Python path makes of sends placed like ``SendGroup.place`` places them."""

    records: bytes
    queues: list[tuple[list[int], list[int], list[int]]]
    index_hashes: list[int]
    index_offsets: list[int]
    responses: bytes
    keys: list[tuple[str, int]]
    code: int
    topic_stats: list[tuple[str, int, int]]


def reference(
    frames: list[bytes], physical_start: int, store_timestamp: int, bases: dict[tuple[str, int], int]
) -> Reference:
    """Decode ``frames`` with the Python decoder and encode them with the Python encoders."""
    decoder = FrameDecoder()
    commands = decoder.feed(b"".join(frames))
    assert len(commands) == len(frames)
    assert len({command.code for command in commands}) == 1, "a group holds one request code"
    next_offset = dict(bases)
    position, parts, appended, responses, keys = physical_start, [], [], [], []
    stats: dict[str, tuple[int, int]] = {}
    for command in commands:
        header = parse_send_request_header(command.code, command.ext_fields)
        props = (header.properties or "").encode("utf-8")
        bodies, properties, flags = [command.body], [props], [header.flag]
        if command.code == RequestCode.SEND_BATCH_MESSAGE:  # as SendProcessor._batch_of
            items = decode_batch_items(command.body)
            bodies, properties, flags = items.bodies, items.properties, items.flags
            properties = [append_properties(p, props) for p in properties] if props else properties
        batch = MessageBatch(
            header.topic,
            header.queue_id,
            bodies,
            properties,
            flags,
            sys_flag=header.sys_flag,
            born_timestamp=header.born_timestamp,
            born_host=BORN,
            reconsume_times=header.reconsume_times or 0,
        )
        key = (batch.topic, batch.queue_id)
        if key not in keys:
            keys.append(key)
        queue_offset = next_offset.setdefault(key, 0)
        next_offset[key] += len(batch)
        record = encode_records_plain(batch, 0, len(batch), queue_offset, position, store_timestamp, STORE)
        parts.append(record)
        positions = [position + sum(batch.size_list[:i]) for i in range(len(batch))]
        appended.append((batch.topic, batch.queue_id, queue_offset, batch.properties, positions, batch.size_list))
        fields = send_response_fields(
            offset_msg_ids(STORE.ip, STORE.port, positions), batch.queue_id, queue_offset, "R", True
        )
        responses.append(command.make_response(ResponseCode.SUCCESS, ext_fields=fields).encode())
        position += len(record)
        messages, size = stats.get(batch.topic, (0, 0))
        stats[batch.topic] = (messages + len(batch), size + len(command.body))  # as SendProcessor counts
    group = dispatch_for_group(TagsCoder([]), appended, store_timestamp)
    queues = [(list(q.physical_offsets), list(q.sizes), list(q.tags_codes)) for q in group.queues]
    return Reference(
        b"".join(parts),
        queues,
        list(group.index_hashes),
        list(group.index_offsets),
        b"".join(responses),
        keys,
        commands[0].code,
        [(topic, messages, size) for topic, (messages, size) in stats.items()],
    )


def check_cut_and_flipped(data: Any, frames: list[bytes]) -> None:
    """``frames`` with up to 3 bytes changed and cut anywhere (``data``: hypothesis' ``st.data()``):
    the lane takes only whole frames, and what it takes still matches the reference's reading of the
    same bytes (no read past the buffer: the cut is the end), up to the first topic the broker
    refuses (a flipped byte in a name: the Python path's check)."""
    buffer = bytearray(b"".join(frames))
    for _ in range(data.draw(st.integers(0, 3))):
        at = data.draw(st.integers(0, len(buffer) - 1))
        buffer[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(buffer)))
    group = scan(bytes(buffer[:cut]))
    if group is None:
        return
    assert group.end <= cut
    taken, position = [], 0
    while position < group.end:
        length = int.from_bytes(buffer[position : position + 4])
        taken.append(bytes(buffer[position : position + 4 + length]))
        position += 4 + length
    assert position == group.end
    refused = group.first_refused([8 if _sendable(topic) else -1 for topic in group.topics])  # as SendLane
    check_parity(taken[:refused], refused)


def _sendable(topic: str) -> bool:
    try:
        check_sendable(topic)
    except InvalidTopicError:
        return False
    return True
