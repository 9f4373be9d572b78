"""Queue selectors for ordered sends: the same key always picks the same queue, as Java's does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sparkmq.client.message import Message
from sparkmq.message.hashing import java_string_hash
from sparkmq.protocol.bodies import MessageQueue

QueueSelector = Callable[[list[MessageQueue], Message, Any], MessageQueue]


def select_by_hash(queues: list[MessageQueue], message: Message, arg: Any) -> MessageQueue:
    """Ordered messages: the same ``arg`` always picks the same queue, the very queue Java's
    ``SelectMessageQueueByHash`` picks (``abs(arg.hashCode() % n)``: ``String.hashCode`` for a
    string, the value of an int, ``Long.hashCode`` past 32 bits), so Java and Python producers
    sharing keys keep per-key order.

    >>> queues = [MessageQueue("T", "b", i) for i in range(8)]
    >>> [select_by_hash(queues, None, key).queue_id for key in ("order-1", 7, -9)]
    [6, 7, 1]
    """
    return queues[abs(_java_hash_code(arg)) % len(queues)]


def _java_hash_code(arg: Any) -> int:
    if isinstance(arg, int) and not isinstance(arg, bool):
        if -(2**31) <= arg < 2**31:
            return arg
        bits = arg & 0xFFFFFFFFFFFFFFFF
        folded = (bits ^ (bits >> 32)) & 0xFFFFFFFF
        return folded - (1 << 32) if folded & 0x80000000 else folded
    return java_string_hash(str(arg))
