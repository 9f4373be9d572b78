"""What slaves acknowledged (``HAService.push2SlaveMaxOffset``) and who waits for it (``GroupTransferService``).

A SYNC_MASTER send waits until some slave reported an offset at or past the end of its
records. Java's ``GroupTransferService`` polls; here each waiter is a future completed by
``ack``.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools


class SlaveAcks:
    """The highest offset any connected slave reported, and futures waiting for offsets."""

    def __init__(self) -> None:
        self.acked = 0
        self.connections = 0
        self._waiters: list[tuple[int, int, asyncio.Future[bool]]] = []
        self._order = itertools.count()

    def ack(self, offset: int) -> None:
        """A slave reported ``offset``: complete every waiter at or below it."""
        if offset <= self.acked:
            return
        self.acked = offset
        while self._waiters and self._waiters[0][0] <= offset:
            _target, _n, future = heapq.heappop(self._waiters)
            if not future.done():
                future.set_result(True)

    def slave_ok(self, target: int, fallbehind_max: int) -> bool:
        """``HAService.isSlaveOK``: a slave is connected and less than ``fallbehind_max`` behind ``target``."""
        return self.connections > 0 and target - self.acked < fallbehind_max

    async def wait(self, target: int, timeout_s: float) -> bool:
        """True once a slave acknowledged ``target``; False after ``timeout_s``."""
        if target <= self.acked:
            return True
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        heapq.heappush(self._waiters, (target, next(self._order), future))
        # A timer, not asyncio.timeout: a request's coroutine runs its first step outside any Task
        # (RemotingConnection._step), where asyncio.timeout refuses to start; not wait_for either:
        # on 3.11 it can swallow a cancel.
        timer = loop.call_later(timeout_s, _expire, future)
        try:
            return await future
        finally:
            timer.cancel()


def _expire(future: asyncio.Future[bool]) -> None:
    if not future.done():
        future.set_result(False)
