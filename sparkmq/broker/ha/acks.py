"""What replicas acknowledged, and who waits for it (``GroupTransferService``).

Each connected replica reports how far its CommitLog reaches. The *confirmed* offset is what
a SYNC_MASTER send waits for:

* RocketMQ 4.x: the highest offset any connected slave reported;
* controller mode (RocketMQ 5): with ``allAckInSyncStateSet`` the lowest offset among the
  SyncStateSet's replicas (the master alone confirms at once); otherwise ``inSyncReplicas - 1``
  replicas must hold it (1: the master's own write is enough).

Java's ``GroupTransferService`` polls; here each waiter is a future completed by ``ack``.
Each replica also keeps when it last held everything the master had sent it
(``lastCatchUpTimeMs``), which decides its place in the SyncStateSet.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
from collections import deque
from dataclasses import dataclass, field

ALL = -1  # MixAll.ALL_ACK_IN_SYNC_STATE_SET
MAX_PENDING_TRANSFERS = 1024  # bounds a lagging replica's memory of unacknowledged transfers


def now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass
class ReplicaAck:
    """One linked replica: its reported offset and since when it had all the master sent."""

    offset: int = 0
    caught_up_ms: int = 0
    sent: deque[tuple[int, int]] = field(default_factory=deque)  # (end offset sent, when), oldest first

    def transferred(self, end: int, at_ms: int) -> None:
        if self.sent and self.sent[-1][0] == end:
            self.sent[-1] = (end, at_ms)  # a heartbeat at the same end: the newest time counts
        else:
            self.sent.append((end, at_ms))
            if len(self.sent) > MAX_PENDING_TRANSFERS:
                self.sent.popleft()  # forgetting an old one only delays the credit: never too generous

    def report(self, offset: int) -> None:
        self.offset = max(self.offset, offset)
        while self.sent and self.sent[0][0] <= offset:
            self.caught_up_ms = max(self.caught_up_ms, self.sent.popleft()[1])


class SlaveAcks:
    """Replica acknowledgements keyed by broker id (controller mode) or by link (4.x)."""

    def __init__(self) -> None:
        self.replicas: dict[object, ReplicaAck] = {}
        self.need = 2  # replicas (master included) that must hold a write; ALL: the SyncStateSet's
        self.sync_state_set: frozenset[object] = frozenset()  # the other members, with need == ALL
        self.any_slave = True  # 4.x: one slave's ack is enough, and no slave means SLAVE_NOT_AVAILABLE
        self.confirmed = 0
        self.serving = True  # False once a controller demoted this master: nothing is confirmed any more
        self._waiters: list[tuple[int, int, asyncio.Future[bool]]] = []
        self._order = itertools.count()

    @property
    def connections(self) -> int:
        return len(self.replicas)

    @property
    def acked(self) -> int:
        """The highest offset any linked replica reported."""
        return max((r.offset for r in self.replicas.values()), default=0)

    def link(self, key: object) -> ReplicaAck:
        replica = self.replicas[key] = ReplicaAck(caught_up_ms=now_ms())
        return replica

    def unlink(self, key: object, replica: ReplicaAck) -> None:
        if self.replicas.get(key) is replica:
            del self.replicas[key]

    def ack(self, replica: ReplicaAck, offset: int) -> None:
        """A replica reported ``offset``: complete every waiter now confirmed."""
        replica.report(offset)
        self.settle()

    def confirmable(self) -> float:
        """The offset the current rule confirms (``inf``: every write, the master alone suffices)."""
        if not self.serving:
            return -1
        if self.any_slave:
            return self.acked
        if self.need == ALL:
            if not self.sync_state_set:
                return math.inf
            return min((self.replicas[k].offset if k in self.replicas else 0) for k in self.sync_state_set)
        if self.need <= 1:
            return math.inf
        offsets = sorted((r.offset for r in self.replicas.values()), reverse=True)
        return offsets[self.need - 2] if len(offsets) >= self.need - 1 else 0

    def settle(self) -> None:
        confirmed = self.confirmable()
        if confirmed != math.inf:
            self.confirmed = max(self.confirmed, int(confirmed))
        while self._waiters and self._waiters[0][0] <= confirmed:
            _target, _n, future = heapq.heappop(self._waiters)
            if not future.done():
                future.set_result(True)

    def stop_serving(self) -> None:
        """This broker is no master any more: every waiting write fails (it stays unconfirmed)."""
        self.serving = False
        for _target, _n, future in self._waiters:
            if not future.done():
                future.set_result(False)
        self._waiters.clear()

    def slave_ok(self, target: int, fallbehind_max: int) -> bool:
        """``HAService.isSlaveOK``: a slave is connected and less than ``fallbehind_max`` behind ``target``.

        Controller mode never refuses up front: a write waits for its acks or times out."""
        if not self.any_slave:
            return True
        return self.connections > 0 and target - self.acked < fallbehind_max

    async def wait(self, target: int, timeout_s: float) -> bool:
        """True once ``target`` is confirmed; False after ``timeout_s``."""
        if target <= self.confirmable():
            return True
        if not self.serving:
            return False
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
