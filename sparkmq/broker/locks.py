"""RebalanceLockManager: which client holds each (group, queue) for orderly consumption.

A lock lasts ``REBALANCE_LOCK_MAX_LIVE_S`` unless renewed (LOCK_BATCH_MQ every 20 s by the
clients); a client may re-take its own lock; UNLOCK_BATCH_MQ frees it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from sparkmq.protocol.bodies import MessageQueue

REBALANCE_LOCK_MAX_LIVE_S = 60.0  # rocketmq.broker.rebalance.lockMaxLiveTime


class RebalanceLockManager:
    """(group, queue) → (client id, last renewal)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._locks: dict[tuple[str, MessageQueue], tuple[str, float]] = {}

    def try_lock(self, group: str, queues: Iterable[MessageQueue], client_id: str) -> list[MessageQueue]:
        """Lock what is free, expired or already this client's; return the queues now held."""
        now = self._clock()
        held = []
        for queue in queues:
            owner = self._locks.get((group, queue))
            if owner is None or owner[0] == client_id or now - owner[1] > REBALANCE_LOCK_MAX_LIVE_S:
                self._locks[(group, queue)] = (client_id, now)
                held.append(queue)
        return held

    def unlock(self, group: str, queues: Iterable[MessageQueue], client_id: str) -> None:
        for queue in queues:
            owner = self._locks.get((group, queue))
            if owner is not None and owner[0] == client_id:
                del self._locks[(group, queue)]
