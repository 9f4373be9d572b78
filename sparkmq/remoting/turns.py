"""Turn groups: the lane-able requests several connections read in one event-loop turn, served together.

With a hundred producers each keeping one or two sends in flight, every read holds about one
request, and a lane serving each read on its own pays its fixed cost (the store's lock, append,
dispatch and flush request) once per request. A connection of a server with a :class:`TurnLane`
therefore only buffers what it reads and asks the server's :class:`TurnGroups` to serve it;
once per loop turn (a ``call_soon`` runs after every read callback of the turn) the groups ask
the lane to *prepare* each waiting connection's leading frames, *serve* them all together (one
store put; each connection gets its own answers in one write), and each connection then serves
the rest of its bytes (and everything, when the lane declined) the usual way, in order.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from sparkmq.remoting.connection import RemotingConnection

logger = logging.getLogger(__name__)

LONE_TURNS = 16  # turns in a row with one reader before reads are served at once again
SWITCHES = 4  # reads from another connection than the read before, before grouping starts again


class TurnLane(Protocol):
    """A frame lane that can serve the leading frames of several connections as one group."""

    def prepare(
        self, buffer: bytes | bytearray, position: int, connection: RemotingConnection
    ) -> tuple[Any, int] | None:
        """What the lane would take from ``buffer[position:]`` (nothing stored or answered yet) and
        the position after it; None when it takes nothing. It must keep no reference to ``buffer``."""

    def serve(self, prepared: list[tuple[RemotingConnection, Any]]) -> bool:
        """Serve and answer every prepared entry, or none of them (False: each connection then serves
        its frames the usual way). Never raises once anything was stored."""


#: ``prepare`` as a connection calls it: the server's, which checks the lane still applies.
Prepare = Callable[[bytes | bytearray, int, "RemotingConnection"], "tuple[Any, int] | None"]


class TurnGroups:
    """Collects the connections that read during one loop turn and serves them once it ends.

    ``prepare(buffer, position, connection)`` and ``serve(prepared)`` are the server's wrappers
    of its :class:`TurnLane` (they log and decline on a lane failure, and decline while the
    lane does not apply, e.g. with an authorizer set).
    """

    def __init__(self, prepare: Prepare, serve: Callable[[list[tuple[RemotingConnection, Any]]], bool]) -> None:
        self._prepare = prepare
        self._serve = serve
        self._waiting: list[RemotingConnection] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        # Deferring costs a loop callback (and with uvloop an extra poll) per turn: it pays only
        # while several connections read in the same turns. It stops after LONE_TURNS turns with
        # one reader, and starts again once reads served at once came from another connection
        # than the read before them SWITCHES times.
        self._grouping = True
        self._lone_turns = 0
        #: While grouping is off, the connection whose reads were served at once last: its next
        #: read is too (a connection checks this before calling ``defer``, one call less per read).
        #: None while grouping.
        self.lone: RemotingConnection | None = None
        self._switches = 0

    def defer(self, connection: RemotingConnection) -> bool:
        """Serve ``connection``'s buffered bytes at the end of this loop turn (once per turn), or
        False when grouping does not pay now: the caller serves them at once."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        if not self._grouping:
            if connection is self.lone:
                return False
            self.lone, self._switches = connection, self._switches + 1
            if self._switches < SWITCHES:
                return False
            self._grouping, self._lone_turns, self.lone, self._switches = True, 0, None, 0
        if not self._waiting:
            loop.call_soon(self._drain)
        self._waiting.append(connection)
        return True

    def _drain(self) -> None:
        waiting, self._waiting = self._waiting, []
        if len(waiting) == 1:  # nobody to group with: served as it read it, without the group's steps
            self._lone_turns += 1
            if self._lone_turns >= LONE_TURNS:
                self._grouping = False
            _finish(waiting[0], None)
            return
        self._lone_turns = 0
        prepare = self._prepare
        prepared: list[tuple[RemotingConnection, Any]] = []
        ends: list[int] = []
        for connection in waiting:
            try:
                taken = connection.prepare_turn(prepare)
            except Exception:  # noqa: BLE001 - that connection's bug: it closes, its neighbours are served
                logger.exception("preparing the turn of connection %s failed; closing it", connection.id)
                connection.close()
                taken = None
            if taken is None:
                _finish(connection, None)  # nothing for the lane: served now, as it read it
            else:
                prepared.append((connection, taken[0]))
                ends.append(taken[1])
        if not prepared:
            return
        if self._serve(prepared):
            for (connection, _token), end in zip(prepared, ends, strict=True):
                _finish(connection, end)
        else:
            for connection, _token in prepared:
                _finish(connection, None)


def _finish(connection: RemotingConnection, taken: int | None) -> None:
    """``connection.finish_turn``; a bug there closes that connection only, never its neighbours'."""
    try:
        connection.finish_turn(taken)
    except Exception:  # noqa: BLE001 - logged; the other connections of the turn are still served
        logger.exception("serving the turn of connection %s failed; closing it", connection.id)
        connection.close()
