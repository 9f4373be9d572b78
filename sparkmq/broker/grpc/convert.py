"""Messages between the gRPC protocol and the store: properties, types, digests, delays.

RocketMQ 5's proxy ``GrpcConverter`` / ``MessageConverter`` mapping: tag -> TAGS, keys -> KEYS,
message id -> UNIQ_KEY, message group -> __SHARDINGKEY, delivery timestamp -> a delay level.
"""

from __future__ import annotations

import hashlib
import socket
import time
import zlib
from collections.abc import Sequence

from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as pb

from sparkmq.message import properties as P
from sparkmq.message.properties import (
    DELAY_TIME_LEVEL,
    KEY_SEPARATOR,
    KEYS,
    TAGS,
    TRANSACTION_PREPARED,
    UNIQ_KEY,
    encode_properties,
)
from sparkmq.message.record import Host, MessageBatch, StoredMessage

MESSAGE_GROUP = P.SHARDING_KEY  # MessageConst.PROPERTY_SHARDING_KEY
DELIVERY_TIME = "__STARTDELIVERTIME"  # the wanted delivery time (ms), kept for the consumer's view
SYSTEM_KEYS = frozenset(
    {MESSAGE_GROUP, DELIVERY_TIME}
    | {value for name, value in vars(P).items() if name.isupper() and isinstance(value, str) and len(value) > 1}
)
ALL_TYPES = (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION)
TYPE_NAMES = {"NORMAL": pb.NORMAL, "FIFO": pb.FIFO, "DELAY": pb.DELAY, "TRANSACTION": pb.TRANSACTION}


MAX_PLAUSIBLE_SECONDS = 10**11  # year 5138: a larger ``seconds`` holds milliseconds


def timestamp_millis(stamp: Timestamp) -> int:
    """A Timestamp in milliseconds. The Python client 5.1.2 puts milliseconds into ``seconds``;
    such a value (beyond any plausible date in seconds) is read as the milliseconds it is."""
    if stamp.seconds > MAX_PLAUSIBLE_SECONDS:
        return int(stamp.seconds)
    return int(stamp.seconds) * 1000 + int(stamp.nanos) // 1_000_000


def message_type(message: pb.Message) -> int:
    """The type a sent message has by its properties (the proxy's ``TopicMessageType.parseFromMessageProperty``)."""
    sp = message.system_properties
    if sp.message_type:
        return int(sp.message_type)
    if sp.message_group:
        return int(pb.FIFO)
    if sp.HasField("delivery_timestamp"):
        return int(pb.DELAY)
    return int(pb.NORMAL)


def delay_level(deliver_at_ms: int, now_ms: int, level_millis: Sequence[int]) -> int:
    """The first delay level that is not early for ``deliver_at_ms`` (0: due now; the last level at most)."""
    wait = deliver_at_ms - now_ms
    if wait <= 0:
        return 0
    for level, millis in enumerate(level_millis, 1):
        if millis >= wait:
            return level
    return len(level_millis)


def to_batch(message: pb.Message, queue_id: int, born_host: Host, level_millis: Sequence[int]) -> MessageBatch:
    """The one-message batch a sent message is stored as."""
    sp = message.system_properties
    props = {entry_key: value for entry_key, value in message.user_properties.items()}
    if sp.tag:
        props[TAGS] = sp.tag
    if sp.keys:
        props[KEYS] = KEY_SEPARATOR.join(sp.keys)
    props[UNIQ_KEY] = sp.message_id
    if sp.message_group:
        props[MESSAGE_GROUP] = sp.message_group
    if sp.HasField("delivery_timestamp"):
        deliver_at = timestamp_millis(sp.delivery_timestamp)
        props[DELIVERY_TIME] = str(deliver_at)
        level = delay_level(deliver_at, int(time.time() * 1000), level_millis)
        if level:
            props[DELAY_TIME_LEVEL] = str(level)
    born = timestamp_millis(sp.born_timestamp) if sp.HasField("born_timestamp") else int(time.time() * 1000)
    return MessageBatch(
        message.topic.name, queue_id, [bytes(message.body)], [encode_properties(props)], [0], 0, born, born_host, 0
    )


def _timestamp(millis: int) -> Timestamp:
    stamp = Timestamp()
    stamp.FromMilliseconds(millis)
    return stamp


def _host(host: Host) -> str:
    return f"{socket.inet_ntoa(host.ip) if len(host.ip) == 4 else host.ip.hex()}:{host.port}"


def digest(body: bytes, kind: int = pb.CRC32) -> pb.Digest:
    """The body digest the 5.x clients verify (CRC32 as upper-case hex, MD5 / SHA1 as hex)."""
    if kind == pb.MD5:
        return pb.Digest(type=pb.MD5, checksum=hashlib.md5(body).hexdigest().upper())
    if kind == pb.SHA1:
        return pb.Digest(type=pb.SHA1, checksum=hashlib.sha1(body).hexdigest().upper())
    return pb.Digest(type=pb.CRC32, checksum=f"{zlib.crc32(body) & 0xFFFFFFFF:08X}")


def to_protobuf(
    stored: StoredMessage, topic: str, receipt_handle: str, invisible_ms: int, attempt: int, digest_type: int
) -> pb.Message:
    """A popped message as the 5.x clients receive it."""
    props = stored.properties
    body = bytes(stored.body)
    sp = pb.SystemProperties(
        message_id=props.get(UNIQ_KEY) or stored.offset_msg_id,
        body_digest=digest(body, digest_type),
        body_encoding=pb.IDENTITY,
        born_timestamp=_timestamp(stored.born_timestamp),
        born_host=_host(stored.born_host),
        store_timestamp=_timestamp(stored.store_timestamp),
        store_host=_host(stored.store_host),
        receipt_handle=receipt_handle,
        queue_id=stored.queue_id,
        queue_offset=stored.queue_offset,
        delivery_attempt=attempt,
    )
    sp.invisible_duration.FromMilliseconds(invisible_ms)
    if TAGS in props:
        sp.tag = props[TAGS]
    if KEYS in props:
        sp.keys.extend(k for k in props[KEYS].split(KEY_SEPARATOR) if k)
    if MESSAGE_GROUP in props:
        sp.message_group = props[MESSAGE_GROUP]
        sp.message_type = pb.FIFO
    elif DELIVERY_TIME in props and props[DELIVERY_TIME].isdigit():
        sp.delivery_timestamp.FromMilliseconds(int(props[DELIVERY_TIME]))
        sp.message_type = pb.DELAY
    elif TRANSACTION_PREPARED in props:
        sp.message_type = pb.TRANSACTION
    else:
        sp.message_type = pb.NORMAL
    user = {k: v for k, v in props.items() if k not in SYSTEM_KEYS}
    return pb.Message(topic=pb.Resource(name=topic), user_properties=user, system_properties=sp, body=body)
