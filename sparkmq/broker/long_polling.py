"""Long polling: pulls that found nothing wait here until a message arrives or they time out.

``wait(topic, queue_id, offset, timeout)`` parks a pull; the store's dispatch listener calls
``notify(topic, queue_id, max_offset)``, which wakes every pull of that queue waiting below
``max_offset`` (``PullRequestHoldService`` + ``NotifyMessageArrivingListener``).
"""

from __future__ import annotations

import asyncio
import threading
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence

from sparkmq.remoting.waits import done_within


class PullHoldService:
    """Parked pulls per queue; ``notify`` may be called from any thread.

    ``max_offset(topic, queue_id)`` is the queue's current max offset (the store's), read once
    a pull is registered.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, max_offset: Callable[[str, int], int]) -> None:
        self._loop = loop
        self._max_offset = max_offset
        self._loop_thread = threading.get_ident()
        self._waiting: dict[tuple[str, int], list[tuple[int, asyncio.Future[None]]]] = defaultdict(list)

    async def wait(self, topic: str, queue_id: int, offset: int, timeout_s: float) -> bool:
        """Park until the queue's max offset passes ``offset``; False on timeout."""
        future: asyncio.Future[None] = self._loop.create_future()
        key = (topic, queue_id)
        entry = (offset, future)
        self._waiting[key].append(entry)
        try:
            # Registered first, then looked: a dispatch after this look finds the entry (it
            # updates the queue before it notifies), one before it is seen here.
            if self._max_offset(topic, queue_id) > offset:
                return True
            return await done_within(future, timeout_s)
        finally:
            waiters = self._waiting.get(key)
            if waiters is not None:
                if entry in waiters:
                    waiters.remove(entry)
                if not waiters:
                    del self._waiting[key]

    def notify(self, topic: str, queue_id: int, max_offset: int) -> None:
        """A dispatch happened: wake the pulls of this queue that now have something to read."""
        if not self._waiting:
            return
        if threading.get_ident() != self._loop_thread:
            self._loop.call_soon_threadsafe(self._wake, topic, queue_id, max_offset)
        else:
            self._wake(topic, queue_id, max_offset)

    def notify_group(self, keys: Sequence[tuple[str, int]], ends: Mapping[tuple[str, int], int]) -> None:
        """A put dispatched to ``keys`` (their new max offsets in ``ends``): one call per put,
        free when no pull is parked (the store's group dispatch listener)."""
        waiting = self._waiting
        if not waiting:
            return
        woken = [(topic, queue_id, ends[topic, queue_id]) for topic, queue_id in keys if (topic, queue_id) in waiting]
        if not woken:
            return
        if threading.get_ident() != self._loop_thread:
            self._loop.call_soon_threadsafe(self._wake_many, woken)
        else:
            self._wake_many(woken)

    def _wake_many(self, woken: list[tuple[str, int, int]]) -> None:
        for topic, queue_id, max_offset in woken:
            self._wake(topic, queue_id, max_offset)

    def _wake(self, topic: str, queue_id: int, max_offset: int) -> None:
        for offset, future in self._waiting.get((topic, queue_id), ()):
            if offset < max_offset and not future.done():
                future.set_result(None)

    def wake_all(self) -> None:
        """Release every parked pull (shutdown): each answers with what it finds."""
        for waiters in self._waiting.values():
            for _offset, future in waiters:
                if not future.done():
                    future.set_result(None)

    @property
    def parked(self) -> int:
        return sum(len(w) for w in self._waiting.values())
