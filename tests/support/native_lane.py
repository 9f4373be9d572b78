"""The Python reference of the native send lane, for the tests of tests/native/: what the usual
path makes of the same frames (records, dispatch columns, responses), built from the package's
own Python encoders."""

from __future__ import annotations

from dataclasses import dataclass

from sparkmq.message.msgid import offset_msg_id
from sparkmq.message.record import Host, MessageBatch, encode_records_plain
from sparkmq.protocol import RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.frame import FrameDecoder
from sparkmq.protocol.headers import parse_send_request_header, send_response_fields
from sparkmq.store.dispatch import TagsCoder, dispatch_for_group

BORN = Host(b"\x7f\x00\x00\x01", 50123)
STORE = Host(b"\x0a\x00\x00\x02", 10911)
MAX_FRAME = 16 * 1024 * 1024
MAX_MESSAGE = 4 * 1024 * 1024


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


@dataclass
class Reference:
    """What the Python path makes of sends placed like ``SendGroup.place`` places them."""

    records: bytes
    queues: list[tuple[list[int], list[int], list[int]]]
    index_hashes: list[int]
    index_offsets: list[int]
    responses: bytes
    keys: list[tuple[str, int]]


def reference(
    frames: list[bytes], physical_start: int, store_timestamp: int, bases: dict[tuple[str, int], int]
) -> Reference:
    """Decode ``frames`` with the Python decoder and encode them with the Python encoders."""
    decoder = FrameDecoder()
    commands = decoder.feed(b"".join(frames))
    assert len(commands) == len(frames)
    next_offset = dict(bases)
    position, parts, appended, responses, keys = physical_start, [], [], [], []
    for command in commands:
        header = parse_send_request_header(command.code, command.ext_fields)
        batch = MessageBatch(
            header.topic,
            header.queue_id,
            [command.body],
            [(header.properties or "").encode("utf-8")],
            [header.flag],
            sys_flag=header.sys_flag,
            born_timestamp=header.born_timestamp,
            born_host=BORN,
            reconsume_times=header.reconsume_times or 0,
        )
        key = (batch.topic, batch.queue_id)
        if key not in keys:
            keys.append(key)
        queue_offset = next_offset.setdefault(key, 0)
        next_offset[key] += 1
        record = encode_records_plain(batch, 0, 1, queue_offset, position, store_timestamp, STORE)
        parts.append(record)
        appended.append((batch.topic, batch.queue_id, queue_offset, batch.properties, [position], batch.size_list))
        fields = send_response_fields(
            offset_msg_id(STORE.ip, STORE.port, position), batch.queue_id, queue_offset, "R", True
        )
        responses.append(command.make_response(ResponseCode.SUCCESS, ext_fields=fields).encode())
        position += len(record)
    group = dispatch_for_group(TagsCoder([]), appended, store_timestamp)
    queues = [(list(q.physical_offsets), list(q.sizes), list(q.tags_codes)) for q in group.queues]
    return Reference(
        b"".join(parts), queues, list(group.index_hashes), list(group.index_offsets), b"".join(responses), keys
    )
