"""ProcessQueue: the messages of one queue pulled but not yet consumed, and what may be committed."""

from __future__ import annotations

import bisect

from sparkmq.client.message import ReceivedMessage


class ProcessQueue:
    """In-flight messages of one queue by queue offset; ``dropped`` once the queue is reassigned."""

    def __init__(self) -> None:
        self._offsets: list[int] = []
        self.max_pulled = -1
        self.dropped = False
        self.locked = False

    def __len__(self) -> int:
        return len(self._offsets)

    def add(self, messages: list[ReceivedMessage]) -> None:
        for message in messages:
            bisect.insort(self._offsets, message.queue_offset)
            self.max_pulled = max(self.max_pulled, message.queue_offset)

    def remove(self, messages: list[ReceivedMessage]) -> int:
        """Drop consumed messages; return the offset now safe to commit (``removeMessage``)."""
        for message in messages:
            at = bisect.bisect_left(self._offsets, message.queue_offset)
            if at < len(self._offsets) and self._offsets[at] == message.queue_offset:
                del self._offsets[at]
        return self.committable()

    def committable(self) -> int:
        """The smallest in-flight offset, or one past the largest pulled when none is in flight."""
        return self._offsets[0] if self._offsets else self.max_pulled + 1
