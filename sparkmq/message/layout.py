"""RocketMQ's stored-record layout: magic codes, sysFlag bits, fixed positions, size limits.

Facts from RocketMQ 4.9.7 ``CommitLog`` / ``MessageDecoder`` / ``MessageSysFlag``; the record's
field table is spelled out in tests/message/test_record_layout.py. All integers are big-endian.
sparkmq always stores IPv4 hosts (v1 records), so every position below is fixed.
"""

from __future__ import annotations

import struct

MESSAGE_MAGIC_CODE = 0xDAA320A7 - (1 << 32)  # -626843481 as Java's signed int
BLANK_MAGIC_CODE = 0xCBD43194 - (1 << 32)  # -875286124: end-of-file filler
END_FILE_MIN_BLANK_LENGTH = 8  # TOTALSIZE + MAGIC of the filler

# sysFlag bits (MessageSysFlag)
COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x2
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
TRANSACTION_TYPE_MASK = 0xC
BORNHOST_V6_FLAG = 0x10
STOREHOST_V6_FLAG = 0x20

# Byte positions inside a v1 record with IPv4 hosts.
POS_TOTAL_SIZE = 0
POS_MAGIC = 4
POS_BODY_CRC = 8
POS_QUEUE_ID = 12
POS_FLAG = 16
POS_QUEUE_OFFSET = 20
POS_PHYSICAL_OFFSET = 28
POS_SYS_FLAG = 36
POS_BORN_TIMESTAMP = 40
POS_BORN_HOST = 48
POS_STORE_TIMESTAMP = 56
POS_STORE_HOST = 64
POS_RECONSUME_TIMES = 72
POS_PREPARED_TX_OFFSET = 76
POS_BODY_LENGTH = 84
POS_BODY = 88

# Everything but body, topic and properties: 88 + 1 (topic length) + 2 (properties length).
RECORD_FIXED_BYTES = 91
HEADER_BYTES = POS_BODY  # the fixed part before the body

# ">iiiiiqqiq" + host(4s i) + q + host(4s i) + i q i : the 88-byte head of a record
RECORD_HEAD = struct.Struct(">iiiiiqqiq4siq4siiqi")
assert RECORD_HEAD.size == HEADER_BYTES

MAX_TOPIC_BYTES = 127  # the topic length is one signed byte in v1 records
MAX_PROPERTIES_BYTES = 32767  # the properties length is a signed int16
DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024  # MessageStoreConfig.maxMessageSize


def record_size(body_len: int, topic_len: int, properties_len: int) -> int:
    """TOTALSIZE of a v1 record with IPv4 hosts (``CommitLog.calMsgLength``).

    >>> record_size(5, 9, 69)
    174
    """
    return RECORD_FIXED_BYTES + body_len + topic_len + properties_len


def transaction_type(sys_flag: int) -> int:
    """The transaction bits of a sysFlag (``MessageSysFlag.getTransactionValue``)."""
    return sys_flag & TRANSACTION_TYPE_MASK
