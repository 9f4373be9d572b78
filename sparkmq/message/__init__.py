"""Pure message codecs: RocketMQ's stored-record layout, properties, batch bodies, msg ids.

No I/O here: everything takes and returns bytes, memoryviews or numpy arrays.

The public names are imported on first use (PEP 562 ``__getattr__``): Spark's per-query source
runner imports ``sparkmq.message.names`` only, and must not pay for the record codecs.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparkmq.message.batch import BatchItems, decode_batch_items, encode_batch_items
    from sparkmq.message.bulk import RecordColumns, decode_columns
    from sparkmq.message.hashing import java_string_hash, java_string_hashes
    from sparkmq.message.msgid import UniqueIdGenerator, decode_offset_msg_id, ipv4_bytes, offset_msg_id
    from sparkmq.message.properties import decode_properties, encode_properties
    from sparkmq.message.record import (
        Host,
        MessageBatch,
        StoredMessage,
        blank_filler,
        decode_record,
        encode_records,
        iter_records,
        record_starts,
        validate_topic,
    )

_HOMES = {  # public name → the module defining it
    **dict.fromkeys(("BatchItems", "decode_batch_items", "encode_batch_items"), "sparkmq.message.batch"),
    **dict.fromkeys(("RecordColumns", "decode_columns"), "sparkmq.message.bulk"),
    **dict.fromkeys(("java_string_hash", "java_string_hashes"), "sparkmq.message.hashing"),
    **dict.fromkeys(
        ("UniqueIdGenerator", "decode_offset_msg_id", "ipv4_bytes", "offset_msg_id"), "sparkmq.message.msgid"
    ),
    **dict.fromkeys(("decode_properties", "encode_properties"), "sparkmq.message.properties"),
    **dict.fromkeys(
        (
            "Host",
            "MessageBatch",
            "StoredMessage",
            "blank_filler",
            "decode_record",
            "encode_records",
            "iter_records",
            "record_starts",
            "validate_topic",
        ),
        "sparkmq.message.record",
    ),
}


def __getattr__(name: str) -> object:
    # AttributeError for any other name: that is how ``from sparkmq.message import layout`` finds a submodule.
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})


__all__ = [
    "BatchItems",
    "Host",
    "MessageBatch",
    "RecordColumns",
    "StoredMessage",
    "UniqueIdGenerator",
    "blank_filler",
    "decode_batch_items",
    "decode_columns",
    "decode_offset_msg_id",
    "decode_properties",
    "decode_record",
    "encode_batch_items",
    "encode_properties",
    "encode_records",
    "ipv4_bytes",
    "iter_records",
    "java_string_hash",
    "java_string_hashes",
    "offset_msg_id",
    "record_starts",
    "validate_topic",
]
