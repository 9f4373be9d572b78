"""The broker's frame lanes as one ``RemotingServer.lane`` (docs/native.md)."""

from __future__ import annotations

import logging

from sparkmq.remoting import RemotingConnection
from sparkmq.remoting.connection import FrameLane

logger = logging.getLogger(__name__)


class Lanes:
    """Several lanes as one ``RemotingServer.lane``: each takes what it can from where the one
    before stopped, round after round, until none takes a frame (a read may mix sends and pulls)."""

    def __init__(self, *lanes: FrameLane) -> None:
        self._lanes = lanes

    def __call__(self, buffer: bytearray, position: int, connection: RemotingConnection) -> int:
        """Serve what the lanes take from ``buffer[position:]``; the position after it."""
        end = len(buffer)
        while True:
            start = position
            for lane in self._lanes:
                if position == end:  # all taken: a read of one request pays for one lane call
                    return position
                try:
                    position = lane(buffer, position, connection)
                except Exception:  # a lane bug: what earlier lanes served stays served, the rest goes the usual way
                    logger.exception("the %s failed; its frames are served by the processors", type(lane).__name__)
                    return position
            if position == start:
                return position
