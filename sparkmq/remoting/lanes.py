"""A server's frame lanes as one ``RemotingServer.lane`` (the broker's send and pull lanes; docs/native.md)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparkmq.remoting.connection import FrameLane, RemotingConnection

logger = logging.getLogger(__name__)


class Lanes:
    """Several lanes as one ``RemotingServer.lane``: each takes what it can from where the one
    before stopped, round after round, until none takes a frame (a read may mix sends and pulls).

    A connection calls ``first`` itself (a read of one request then costs one lane call and no
    frame of this class) and hands the rest of the round to :meth:`resume`; a lane's failure is
    logged and what it had not taken goes the usual way, whoever called it.
    """

    def __init__(self, *lanes: FrameLane) -> None:
        if not lanes:
            raise ValueError("Lanes needs at least one lane")
        self._lanes = lanes
        self.first = lanes[0]

    def __call__(self, buffer: bytes | bytearray, position: int, connection: RemotingConnection) -> int:
        """Serve what the lanes take from ``buffer[position:]``; the position after it."""
        try:
            taken = self.first(buffer, position, connection)
        except Exception:  # a lane bug: nothing taken, the frames go the usual way
            logger.exception("the %s failed; its frames are served by the processors", type(self.first).__name__)
            return position
        return self.resume(buffer, position, taken, connection)

    def resume(self, buffer: bytes | bytearray, start: int, position: int, connection: RemotingConnection) -> int:
        """Where :meth:`__call__` from ``start`` ends, given that ``first`` took ``buffer[start:position]``."""
        end, lanes = len(buffer), self._lanes
        rest = lanes[1:]
        while True:
            for lane in rest:
                if position == end:  # all taken: a read of one request pays for one lane call
                    return position
                try:
                    position = lane(buffer, position, connection)
                except Exception:  # a lane bug: what earlier lanes served stays served, the rest goes the usual way
                    logger.exception("the %s failed; its frames are served by the processors", type(lane).__name__)
                    return position
            if position in (start, end):
                return position
            start, rest = position, lanes  # another round, every lane from the first
