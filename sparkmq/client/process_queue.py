"""ProcessQueue: the messages of one queue pulled but not yet consumed, and what may be committed."""

from __future__ import annotations

import bisect

from sparkmq.client.message import ReceivedMessage


class ProcessQueue:
    """In-flight messages of one queue by queue offset; ``dropped`` once the queue is reassigned.

    It also answers the pull loop's flow-control questions (``ProcessQueue`` in Java): how many
    messages and body bytes are cached, and the offset span between the oldest and newest.
    """

    def __init__(self) -> None:
        self._offsets: list[int] = []
        self._sizes: dict[int, int] = {}
        self.cached_bytes = 0
        self.max_pulled = -1
        self.dropped = False
        self.locked = False

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def span(self) -> int:
        """Newest pulled minus oldest unconsumed offset: how far one slow message holds the commit back.

        (Java's ``getMaxSpan`` measures only what is still cached, so a stuck message whose
        neighbours were all consumed reads as span 0 and pulling goes on; this one does not.)
        """
        return self.max_pulled - self._offsets[0] if self._offsets else 0

    def add(self, messages: list[ReceivedMessage]) -> None:
        for message in messages:
            offset = message.queue_offset
            if offset in self._sizes:
                continue
            bisect.insort(self._offsets, offset)
            self._sizes[offset] = len(message.body)
            self.cached_bytes += len(message.body)
            self.max_pulled = max(self.max_pulled, offset)

    def remove(self, messages: list[ReceivedMessage]) -> int:
        """Drop consumed messages; return the offset now safe to commit (``removeMessage``)."""
        for message in messages:
            size = self._sizes.pop(message.queue_offset, None)
            if size is None:
                continue
            self.cached_bytes -= size
            del self._offsets[bisect.bisect_left(self._offsets, message.queue_offset)]
        return self.committable()

    def committable(self) -> int:
        """The smallest in-flight offset, or one past the largest pulled when none is in flight."""
        return self._offsets[0] if self._offsets else self.max_pulled + 1
