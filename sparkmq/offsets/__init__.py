"""Consumer offsets: (group, topic, queue_id) → next offset, persisted as consumerOffset.json.

Example::

    >>> table = ConsumerOffsetTable()
    >>> table.commit("CID_TEST", "TopicTest", 0, 5)
    >>> table.query("CID_TEST", "TopicTest", 0)
    5
"""

from __future__ import annotations

from sparkmq.offsets.offset_file import (
    OffsetFile,
    OffsetFileRecoveredWarning,
    decode_offset_table,
    encode_offset_table,
)
from sparkmq.offsets.table import (
    OFFSET_ABSENT,
    TOPIC_GROUP_SEPARATOR,
    ConsumerOffsetTable,
    OffsetSnapshot,
)

__all__ = [
    "OFFSET_ABSENT",
    "TOPIC_GROUP_SEPARATOR",
    "ConsumerOffsetTable",
    "OffsetFile",
    "OffsetFileRecoveredWarning",
    "OffsetSnapshot",
    "decode_offset_table",
    "encode_offset_table",
]
