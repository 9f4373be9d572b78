"""Delayed messages on the way in: a DELAY level moves a message to SCHEDULE_TOPIC_XXXX.

``CommitLog.asyncPutMessage`` in RocketMQ: the real topic and queue go into REAL_TOPIC /
REAL_QID, the message is stored in queue ``level - 1`` of the schedule topic, and
ScheduleMessageService (``schedule.py``) delivers it when due.
"""

from __future__ import annotations

import dataclasses

from sparkmq.message import layout as L
from sparkmq.message.names import SCHEDULE_TOPIC
from sparkmq.message.properties import DELAY_TIME_LEVEL, REAL_QUEUE_ID, REAL_TOPIC, decode_properties, encode_properties
from sparkmq.message.record import MessageBatch


def delay_level_of(properties: bytes) -> int:
    """The DELAY property as an int (0 when absent or not a number)."""
    value = decode_properties(properties).get(DELAY_TIME_LEVEL, "0")
    return int(value) if value.isdigit() else 0


def redirect_if_delayed(batch: MessageBatch, max_level: int) -> MessageBatch:
    """The same single message bound for the schedule topic, when it carries a delay level."""
    if len(batch) != 1 or L.transaction_type(batch.sys_flag) not in (L.TRANSACTION_NOT_TYPE, L.TRANSACTION_COMMIT_TYPE):
        return batch
    level = delay_level_of(batch.properties[0])
    if level <= 0:
        return batch
    level = min(level, max_level)
    props = decode_properties(batch.properties[0])
    props[DELAY_TIME_LEVEL] = str(level)
    props[REAL_TOPIC] = batch.topic
    props[REAL_QUEUE_ID] = str(batch.queue_id)
    return dataclasses.replace(batch, topic=SCHEDULE_TOPIC, queue_id=level - 1, properties=[encode_properties(props)])
