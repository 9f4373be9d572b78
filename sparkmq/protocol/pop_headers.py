"""The custom headers of RocketMQ 5's POP requests (POP_MESSAGE 200050, ACK_MESSAGE 200051,
CHANGE_MESSAGE_INVISIBLETIME 200053), with Java's field names.

``extraInfo`` is the message's ``POP_CK`` (``ExtraInfoUtil``):
``"startOffset popTime invisibleTime reviveQid topicType brokerName queueId offset"``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .schema import CommandHeader, Int32, Int64


@dataclass(frozen=True, slots=True)
class PopMessageRequestHeader(CommandHeader):
    """POP_MESSAGE: up to ``maxMsgNums`` messages, invisible for ``invisibleTime`` ms; ``queueId`` -1: any queue."""

    consumer_group: str
    topic: str
    queue_id: Int32
    max_msg_nums: Int32
    invisible_time: Int64
    poll_time: Int64
    born_time: Int64
    init_mode: Int32
    exp_type: str | None = None
    exp: str | None = None
    order: bool | None = None
    attempt_id: str | None = None


@dataclass(frozen=True, slots=True)
class PopMessageResponseHeader(CommandHeader):
    """POP_MESSAGE's answer: ``startOffsetInfo`` / ``msgOffsetInfo`` let the client build each POP_CK."""

    pop_time: Int64
    invisible_time: Int64
    revive_qid: Int32
    rest_num: Int64
    start_offset_info: str | None = None
    msg_offset_info: str | None = None
    order_count_info: str | None = None


@dataclass(frozen=True, slots=True)
class AckMessageRequestHeader(CommandHeader):
    """ACK_MESSAGE: one popped message, named by its ``extraInfo`` and ``offset``."""

    consumer_group: str
    topic: str
    queue_id: Int32
    extra_info: str
    offset: Int64


@dataclass(frozen=True, slots=True)
class ChangeInvisibleTimeRequestHeader(CommandHeader):
    """CHANGE_MESSAGE_INVISIBLETIME: a popped message invisible for ``invisibleTime`` ms from now."""

    consumer_group: str
    topic: str
    queue_id: Int32
    extra_info: str
    offset: Int64
    invisible_time: Int64


@dataclass(frozen=True, slots=True)
class ChangeInvisibleTimeResponseHeader(CommandHeader):
    """CHANGE_MESSAGE_INVISIBLETIME's answer: the new pop time of the message's next ``extraInfo``."""

    pop_time: Int64
    invisible_time: Int64
    revive_qid: Int32
