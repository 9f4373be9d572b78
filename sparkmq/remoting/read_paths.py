"""How a :class:`~sparkmq.remoting.connection.RemotingConnection` serves what it read.

Three paths, chosen per read by ``RemotingConnection.data_received``:

* a **lone read** (``_serve_read``): a server's lanes look at the read's own bytes, and only what
  they leave goes into the decoder;
* a **turn group** (``prepare_turn``, ``finish_turn``): the read waits for the end of the loop turn
  (held as it came when nothing was buffered before it), the server's turn lane serves the
  leading frames of every connection that read in that turn together
  (:mod:`sparkmq.remoting.turns`), and each connection serves the rest;
* the **buffer** (``_serve_buffer``): the lanes take a leading run of the buffered frames, the
  decoder the rest (every read of a client's connection comes this way); ``_dispatch`` sorts
  what it decodes (responses, refused requests, requests for :mod:`sparkmq.remoting.serving`).

The functions are ``RemotingConnection``'s methods (``self`` is the connection), bound by name in
its class body: a read calls them as it did when they were written there, with no call, frame or
lookup more, and mypy checks them against the connection itself. ``data_received`` stays in
connection.py: the client's connection reaches it through ``super()`` on every read, and from a
base class that lookup would walk one class dict more.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from sparkmq.errors import ProtocolError
from sparkmq.protocol.codes import LENGTH_PREFIX_BYTES
from sparkmq.remoting.limits import MAX_IN_FLIGHT_REQUESTS

if TYPE_CHECKING:
    import asyncio

    from sparkmq.protocol import RemotingCommand
    from sparkmq.remoting.connection import RemotingConnection
    from sparkmq.remoting.lanes import Lanes
    from sparkmq.remoting.turns import Prepare

# The connection's logger: these records are the connection's, under the name they always had.
logger = logging.getLogger("sparkmq.remoting.connection")


def _serve_read(self: RemotingConnection, data: bytes, lanes: Lanes) -> None:
    """Serve a read that found nothing buffered: the lanes look at ``data`` itself, and only
    what they leave goes into the decoder (a lone request: no copy, no decoder step)."""
    self._receiving = True
    try:
        taken = lanes.first(data, 0, self)
    except Exception:  # noqa: BLE001 - a lane bug: logged, the frames go the decoded way
        logger.exception("the %s failed; its frames are served by the processors", type(lanes.first).__name__)
        taken = 0
    else:
        if taken != len(data):
            taken = lanes.resume(data, 0, taken, self)
    if taken != len(data) or not taken:  # what the lanes left (usually nothing), decoded as usual
        if not 0 <= taken <= len(data):  # as FrameDecoder.skip_to checks a lane's position
            self._receiving = False
            raise ValueError(f"a frame lane returned position {taken} outside [0, {len(data)}]")
        self._decoder.receive_data(memoryview(data)[taken:] if taken else data)
        self._serve_buffer(taken > 0, lanes_done=True)
        return
    self._receiving = False
    if self._out:
        self._flush_out()
    # No _account_unfinished_frame (nor the watchdog's frame_progress): the buffer was empty
    # before this read and is again, and whatever emptied it last accounted for that then.
    if self._charged:
        self._account_unfinished_frame(True)
    if len(self._tasks) >= MAX_IN_FLIGHT_REQUESTS:
        self._block_reading("in-flight")


def prepare_turn(self: RemotingConnection, prepare: Prepare) -> tuple[Any, int] | None:
    """At the end of a loop turn: what ``prepare`` (the server's turn lane) would take from the
    front of this connection's buffer, and the position after it; None when nothing, or when
    the lane may not serve this connection now (as ``data_received``'s own conditions)."""
    transport = self._transport  # not self.is_open, without its call
    if self._lanes is None or self._unstarted or self._paused or transport is None or transport.is_closing():
        return None
    held = self._held
    buffer, position = (held, 0) if held is not None else self._decoder.front()
    if len(buffer) - position < LENGTH_PREFIX_BYTES:
        return None
    taken = prepare(buffer, position, self)  # taken only by finish_turn, once the whole group is served
    if taken is not None:  # frames the group's answers wait for (none usually) are finish_turn's to write
        self._receiving = True
    return taken


def finish_turn(self: RemotingConnection, taken: int | None) -> None:
    """Serve the bytes read this turn: the frames before ``taken`` were served by the turn's
    group (None: none were), the rest the usual way."""
    self._turn_waiting = False
    self._receiving = False
    held, self._held = self._held, None
    transport = self._transport
    if transport is None or transport.is_closing():
        return  # closed meanwhile: nothing was stored for it, nobody to answer
    if held is None:
        decoded = taken is not None and self._decoder.skip_to(taken)
        whole = decoded and not self._inbox
    elif taken is None:  # the group took none of the held read: served as a lone read is
        lanes = self._lanes
        if lanes is not None and not self._unstarted and not self._paused:
            self._serve_read(held, lanes)
        else:
            self._decoder.receive_data(held)
            self._serve_buffer(False)
        if self._closing_when_served and not self._tasks:
            self.close()
        return
    else:
        decoded, whole = True, taken == len(held)
        if not whole:  # what the group left goes into the decoder
            if not 0 < taken < len(held):  # as FrameDecoder.skip_to checks a lane's position
                raise ValueError(f"a turn lane returned position {taken} outside (0, {len(held)})")
            self._decoder.receive_data(memoryview(held)[taken:])
    if whole:
        # The common case with many connections: the group served all this connection read.
        # What _serve_buffer would do with an empty buffer, without its steps.
        if self._out:
            self._flush_out()
        if self._charged:  # _account_unfinished_frame of an empty buffer, without its steps
            self._account_unfinished_frame(True)
        elif self._watchdog is not None:
            self._watchdog.frame_progress(0, True)
        if len(self._tasks) >= MAX_IN_FLIGHT_REQUESTS:  # a SYNC group's answers wait as a task
            self._block_reading("in-flight")
    else:
        self._serve_buffer(decoded)
    if self._closing_when_served and not self._tasks:
        self.close()  # the peer half-closed in the same turn: its answers are out


def _serve_buffer(self: RemotingConnection, decoded: bool, lanes_done: bool = False) -> None:
    """Serve the whole frames buffered (``decoded``: frames before them were served already;
    ``lanes_done``: the lanes already declined the first of them)."""
    requests: list[RemotingCommand] = []
    decoder = self._decoder
    self._receiving = True
    whole = False  # the lanes took every byte read: nothing to decode, no unfinished frame
    try:
        lanes = self._lanes
        if lanes is not None and not lanes_done and not self._unstarted and not self._paused:
            # requests are served in arrival order: the lanes take a leading run, the rest follow
            buffer, position = decoder.front()
            if len(buffer) - position >= LENGTH_PREFIX_BYTES:
                try:  # Lanes.__call__ without its frame: a lone send is one lane call
                    taken = lanes.first(buffer, position, self)
                except Exception:  # noqa: BLE001 - a lane bug: logged, the frames go the decoded way
                    logger.exception(
                        "the %s failed; its frames are served by the processors", type(lanes.first).__name__
                    )
                    taken = position
                else:
                    if taken != len(buffer):
                        taken = lanes.resume(buffer, position, taken, self)
                whole = taken == len(buffer) and taken > position
                decoded = decoder.skip_to(taken) or decoded
        if not whole and decoder.buffered_bytes:  # what the lane left (usually nothing)
            while (command := decoder.next_command()) is not None:
                decoded = True
                self._dispatch(command, requests)
    except ProtocolError as exc:
        logger.warning("closing connection %s from %s:%d: %s", self.id, *self.peer, exc.remark)
        self._serve_all(requests)  # every request before the bad frame is answered
        self._close_when_served()
        return
    finally:
        self._receiving = False
        if self._out:
            self._flush_out()
    if requests:
        self._serve_all(requests)
    if whole and not self._charged:  # _account_unfinished_frame of an empty buffer, without its steps
        if self._watchdog is not None:
            self._watchdog.frame_progress(0, True)
    else:
        self._account_unfinished_frame(decoded)
    if len(self._tasks) >= MAX_IN_FLIGHT_REQUESTS:
        self._block_reading("in-flight")


def _dispatch(self: RemotingConnection, command: RemotingCommand, requests: list[RemotingCommand]) -> None:
    """What a decoded frame is: a response completes its waiter, a request the decoder refused is
    answered with its defect, any other request joins ``requests`` (this read's, served next)."""
    if command.is_response:
        future: asyncio.Future[Any] | None = self._pending.pop(command.opaque, None) or self._lean.pop(
            command.opaque, None
        )
        if future is not None and not future.done():
            future.set_result(command)
    elif command.defect is not None:
        logger.info("refused request code %d from %s:%d: %s", command.code, *self.peer, command.defect.remark)
        if not command.is_oneway:
            self.send(command.make_response(command.defect.code, remark=command.defect.remark))
    elif self._handler is not None or self._group_handler is not None:
        requests.append(command)


def set_lanes(self: RemotingConnection, lanes: Lanes | None) -> None:
    """Serve the leading frames of later reads with ``lanes`` (None: decode every frame); the
    server's, whenever its lane or authorizer changes. Turn grouping stays as it was made."""
    self._lanes = lanes
