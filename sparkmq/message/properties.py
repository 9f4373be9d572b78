"""RocketMQ's message properties string: ``key 0x01 value 0x02 …`` and the reserved keys.

Java drops the trailing ``0x02``; C++ 1.2.3 and ali-ons keep it. The parser
accepts both and skips empty items and items without a ``0x01``.
"""

from __future__ import annotations

from collections.abc import Mapping

from sparkmq.errors import MessageError, PropertiesTooLargeError
from sparkmq.message.layout import MAX_PROPERTIES_BYTES

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

KEYS = "KEYS"
TAGS = "TAGS"
WAIT_STORE_MSG_OK = "WAIT"
DELAY_TIME_LEVEL = "DELAY"
RETRY_TOPIC = "RETRY_TOPIC"
REAL_TOPIC = "REAL_TOPIC"
REAL_QUEUE_ID = "REAL_QID"
TRANSACTION_PREPARED = "TRAN_MSG"
PRODUCER_GROUP = "PGROUP"
MIN_OFFSET = "MIN_OFFSET"
MAX_OFFSET = "MAX_OFFSET"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
RECONSUME_TIME = "RECONSUME_TIME"
MSG_REGION = "MSG_REGION"
TRACE_ON = "TRACE_ON"
UNIQ_KEY = "UNIQ_KEY"
MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
CONSUME_START_TIME = "CONSUME_START_TIME"
TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
SHARDING_KEY = "__SHARDINGKEY"  # a FIFO message's message group
CLUSTER = "CLUSTER"
# sparkmq's own: a half message whose body is a SEND_BATCH body; its END commits every message in it at once
TRANSACTION_BATCH = "SPARKMQ_TXN_BATCH"

KEY_SEPARATOR = " "  # KEYS holds several business keys separated by spaces


def encode_properties(properties: Mapping[str, str]) -> bytes:
    """Encode a properties map as RocketMQ's UTF-8 string, Java style (no trailing 0x02).

    >>> encode_properties({"TAGS": "TagA", "KEYS": "k1"})
    b'TAGS\\x01TagA\\x02KEYS\\x01k1'
    """
    parts = []
    for key, value in properties.items():
        if not key or NAME_VALUE_SEPARATOR in key or PROPERTY_SEPARATOR in key:
            raise MessageError(f"property key {key!r} is empty or holds a separator (\\x01 or \\x02)")
        if NAME_VALUE_SEPARATOR in value or PROPERTY_SEPARATOR in value:
            raise MessageError(f"property {key!r} has a value holding a separator (\\x01 or \\x02)")
        parts.append(f"{key}{NAME_VALUE_SEPARATOR}{value}")
    encoded = PROPERTY_SEPARATOR.join(parts).encode("utf-8")
    if len(encoded) > MAX_PROPERTIES_BYTES:
        raise PropertiesTooLargeError(f"properties of {len(encoded)} bytes exceed {MAX_PROPERTIES_BYTES}")
    return encoded


def decode_properties(data: bytes | memoryview | str) -> dict[str, str]:
    """Parse a properties string; tolerant of a trailing separator and of empty items.

    >>> decode_properties(b"KEYS\\x01k1\\x02TAGS\\x01TagA\\x02")
    {'KEYS': 'k1', 'TAGS': 'TagA'}
    """
    text = data if isinstance(data, str) else bytes(data).decode("utf-8", errors="replace")
    result: dict[str, str] = {}
    for item in text.split(PROPERTY_SEPARATOR):
        key, sep, value = item.partition(NAME_VALUE_SEPARATOR)
        if sep and key and value:
            result[key] = value
    return result


def append_properties(item_properties: bytes, extra: bytes) -> bytes:
    """Append batch-level properties to an item's, inserting 0x02 when needed (the broker does this per item)."""
    if not extra:
        return item_properties
    if not item_properties or item_properties.endswith(b"\x02"):
        return item_properties + extra
    return item_properties + b"\x02" + extra


def find_property(raw: bytes, key: bytes) -> bytes | None:
    """The raw value of ``key`` in an encoded properties string, without parsing the rest.

    Agrees with ``decode_properties`` (and Java's HashMap parse): the last item with a
    non-empty value wins, since batch-level properties are appended after an item's own.

    >>> find_property(b"KEYS\\x01k1\\x02TAGS\\x01TagA", b"TAGS")
    b'TagA'
    """
    needle = key + b"\x01"
    at = raw.rfind(needle)
    while at >= 0:
        if at == 0 or raw[at - 1] == 2:  # only at the start of an item
            start = at + len(needle)
            end = raw.find(b"\x02", start)
            value = raw[start:] if end < 0 else raw[start:end]
            if value:
                return value
        at = raw.rfind(needle, 0, at)
    return None
