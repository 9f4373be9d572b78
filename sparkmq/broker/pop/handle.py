"""The receipt handle of a popped message, in the shape of RocketMQ 5's ``ExtraInfoUtil`` extraInfo.

``"ckId popTime invisibleTime reviveQid topicType brokerName queueId offset"``: ``topicType``
is ``1`` when the message was popped from the group's retry topic, else ``0``. ``ckId`` names
the checkpoint the broker keeps for it; a changed invisible time gives a new handle.

>>> h = ReceiptHandle(7, 1700000000000, 30000, "broker-a", 2, 15, retry=False)
>>> ReceiptHandle.decode(h.encode()) == h
True
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkmq.errors import InvalidReceiptHandleError

MAX_HANDLE_CHARS = 512  # a handle is ~60 characters; anything longer is not ours
_FIELDS = 8


@dataclass(frozen=True, slots=True)
class ReceiptHandle:
    """Which checkpoint a popped message belongs to, and when it turns visible again."""

    ck_id: int
    pop_time_ms: int
    invisible_ms: int
    broker_name: str
    queue_id: int
    offset: int
    retry: bool

    @property
    def deadline_ms(self) -> int:
        return self.pop_time_ms + self.invisible_ms

    def encode(self) -> str:
        kind = "1" if self.retry else "0"
        where = f"{self.broker_name} {self.queue_id} {self.offset}"
        return f"{self.ck_id} {self.pop_time_ms} {self.invisible_ms} 0 {kind} {where}"

    @classmethod
    def decode(cls, text: str) -> ReceiptHandle:
        """Parse ``text``; InvalidReceiptHandleError names what is wrong."""
        if len(text) > MAX_HANDLE_CHARS:
            raise InvalidReceiptHandleError(f"receipt handle of {len(text)} characters is not one of this broker's")
        parts = text.split(" ")
        if len(parts) != _FIELDS or parts[4] not in ("0", "1"):
            raise InvalidReceiptHandleError(f"malformed receipt handle {text[:80]!r}")
        try:
            ck, pop_time, invisible, _revive_qid, _kind, _broker, queue_id, offset = parts
            values = int(ck), int(pop_time), int(invisible), int(queue_id), int(offset)
        except ValueError as exc:
            raise InvalidReceiptHandleError(f"malformed receipt handle {text[:80]!r}") from exc
        if min(values) < 0:
            raise InvalidReceiptHandleError(f"malformed receipt handle {text[:80]!r}")
        return cls(values[0], values[1], values[2], parts[5], values[3], values[4], retry=parts[4] == "1")
