"""Pure message codecs: RocketMQ's stored-record layout, properties, batch bodies, msg ids.

No I/O here: everything takes and returns bytes, memoryviews or numpy arrays.
"""

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
