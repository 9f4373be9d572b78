"""DefaultBrokerHeartbeatManager: which replicas are alive, and what they last said.

A broker is alive while its BROKER_HEARTBEATs arrive within its own ``heartbeatTimeoutMills``
(``controllerHeartBeatTimeoutMills`` on the broker) and the connection they came on is open:
a closed connection makes it inactive at once, which is how a killed master is noticed
without waiting for the timeout.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

Key = tuple[str, str, int]  # (clusterName, brokerName, brokerId)


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass
class BrokerLiveInfo:
    broker_name: str
    broker_id: int
    address: str
    last_update_ms: int
    timeout_ms: int
    epoch: int
    max_offset: int
    confirm_offset: int
    election_priority: int
    channel: object


class BrokerHeartbeatManager:
    """The live table; :meth:`scan` and :meth:`channel_closed` return the replicas that left."""

    def __init__(self, clock: Callable[[], int] = monotonic_ms) -> None:
        self.clock = clock
        self.live: dict[Key, BrokerLiveInfo] = {}

    def heartbeat(self, cluster: str, info: BrokerLiveInfo) -> None:
        info.last_update_ms = self.clock()
        self.live[(cluster, info.broker_name, info.broker_id)] = info

    def is_alive(self, cluster: str, name: str, broker_id: int) -> bool:
        info = self.live.get((cluster, name, broker_id))
        return info is not None and self.clock() - info.last_update_ms <= info.timeout_ms

    def live_info(self, cluster: str, name: str, broker_id: int) -> tuple[int, int, int] | None:
        info = self.live.get((cluster, name, broker_id))
        return None if info is None else (info.epoch, info.max_offset, info.election_priority)

    def scan(self) -> list[Key]:
        """Forget replicas silent for longer than their timeout."""
        now = self.clock()
        gone = [key for key, info in self.live.items() if now - info.last_update_ms > info.timeout_ms]
        for key in gone:
            del self.live[key]
        return gone

    def channel_closed(self, channel: object) -> list[Key]:
        """Forget the replicas that heart-beat on ``channel``."""
        gone = [key for key, info in self.live.items() if info.channel is channel]
        for key in gone:
            del self.live[key]
        return gone
