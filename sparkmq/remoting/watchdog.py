"""The server connection's watchdog: it closes a connection idle too long, or stuck in one frame.

The limits it enforces (``ServerLimits.idle_timeout_s``, ``frame_deadline_s``) are in
:mod:`sparkmq.remoting.limits`; a :class:`~sparkmq.remoting.connection.RemotingConnection` with
either set makes one and reports each read's activity and frame progress to it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparkmq.remoting.connection import RemotingConnection

# The connection's logger: the closes it logs are the connection's, under the name they always had.
logger = logging.getLogger("sparkmq.remoting.connection")


class Watchdog:
    """Closes a server connection idle for ``idle_s`` or stuck in one frame for ``frame_s``.

    One timer per connection, re-armed lazily: activity only records the time, and the timer,
    when it fires, either closes the connection or sleeps until the next deadline. A connection
    serving a request (a parked long-poll PULL) is not idle, unless its peer has not taken a
    byte of our responses for as long (a reader that never reads, as Netty's all-idle state).
    """

    def __init__(self, connection: RemotingConnection, idle_s: float | None, frame_s: float | None) -> None:
        self._connection = connection
        self._idle_s = idle_s
        self._frame_s = frame_s
        self._loop = asyncio.get_running_loop()
        self._last_activity = self._loop.time()
        self._frame_started: float | None = None
        self._timer: asyncio.Handle | None = None
        self._timer_when = 0.0
        self._arm()

    def activity(self) -> None:
        self._last_activity = self._loop.time()

    def frame_progress(self, buffered: int, decoded: bool) -> None:
        """After a read: ``buffered`` bytes of an unfinished frame remain; ``decoded`` frames completed."""
        if not buffered:
            self._frame_started = None
        elif decoded or self._frame_started is None:
            self._frame_started = self._loop.time()
            self._arm()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _due(self) -> float | None:
        dues = []
        if self._idle_s is not None:
            dues.append(self._last_activity + self._idle_s)
        if self._frame_s is not None and self._frame_started is not None:
            dues.append(self._frame_started + self._frame_s)
        return min(dues) if dues else None

    def _arm(self) -> None:
        due = self._due()
        if due is None or (self._timer is not None and self._timer_when <= due):
            return
        self.cancel()
        self._timer, self._timer_when = self._loop.call_at(due, self._fire), due  # see RemotingConnection._arm_sweeper

    def _fire(self) -> None:
        self._timer = None
        now, connection = self._loop.time(), self._connection
        if self._frame_s is not None and self._frame_started is not None and now >= self._frame_started + self._frame_s:
            logger.warning(
                "closing connection %s from %s:%d: a frame did not finish arriving within %.3g s",
                connection.id,
                *connection.peer,
                self._frame_s,
            )
            connection.close()
            return
        if self._idle_s is not None and now >= self._last_activity + self._idle_s:
            if connection.in_flight and not connection.writes_paused:
                self._last_activity = now  # serving a parked request is not idleness
            else:
                logger.info(
                    "closing connection %s from %s:%d: idle for %.3g s", connection.id, *connection.peer, self._idle_s
                )
                connection.close()
                return
        self._arm()
