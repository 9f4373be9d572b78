"""Latency fault tolerance: brokers that failed or answered slowly are avoided for a while.

RocketMQ's ``MQFaultStrategy``: a send taking ``latencyMax[i]`` ms or more makes the broker
unavailable for ``notAvailableDuration[i]`` ms; a failed send counts as 30 s of latency.
"""

from __future__ import annotations

import time
from collections.abc import Callable

LATENCY_MAX_MS = (50, 100, 550, 1000, 2000, 3000, 15000)
NOT_AVAILABLE_MS = (0, 0, 30_000, 60_000, 120_000, 180_000, 600_000)
FAILURE_LATENCY_MS = 30_000
#: The least latency that pauses a broker: a faster send needs no bookkeeping while none is paused.
FIRST_PAUSING_MS = min(limit for limit, pause in zip(LATENCY_MAX_MS, NOT_AVAILABLE_MS, strict=True) if pause)


class LatencyFaultTolerance:
    """Broker name → monotonic time (ms) from which it may be used again (``paused``; empty: all usable)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.paused: dict[str, float] = {}  # read by the producer's hot path: empty → no clock read, no lookup

    def record(self, broker_name: str, latency_ms: float, failed: bool = False) -> None:
        latency = FAILURE_LATENCY_MS if failed else latency_ms
        pause = 0
        for limit, duration in zip(reversed(LATENCY_MAX_MS), reversed(NOT_AVAILABLE_MS), strict=True):
            if latency >= limit:
                pause = duration
                break
        self.paused[broker_name] = self._clock() * 1000 + pause

    def succeeded(self, broker_name: str, latency_ms: float) -> None:
        """``record`` of a send that succeeded: a fast one makes the broker available at once."""
        if latency_ms >= FIRST_PAUSING_MS:
            self.record(broker_name, latency_ms)
        elif self.paused:
            self.paused.pop(broker_name, None)

    def is_available(self, broker_name: str) -> bool:
        if not self.paused:  # no broker ever failed or was slow: no clock read per send
            return True
        return self._clock() * 1000 >= self.paused.get(broker_name, 0)
