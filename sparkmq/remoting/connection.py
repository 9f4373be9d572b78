"""RemotingConnection: one TCP connection speaking the remoting protocol, either side.

Requests are served concurrently (a parked PULL must not block a SEND on the same socket);
responses complete the caller's future by opaque. A protocol violation closes only this
connection, after every command that preceded the bad frame was answered. The server and the
client both use this class; they differ in who connects.

Bounded by design: reading pauses while too many requests are in flight or while the peer does
not read its responses (asyncio's ``pause_writing``), so a peer that pipelines and never reads
costs at most the write high-water mark plus the responses already being built. On a server,
a :class:`~sparkmq.remoting.watchdog.Watchdog` closes the connection when it stays idle or a
frame takes too long, and a shared :class:`FrameBudget` caps the unfinished frames all
connections hold.

This module holds the connection's state and its framing, writing, flow control, lifecycle and
outgoing requests. How a read is served is in :mod:`sparkmq.remoting.read_paths`, how decoded
requests are answered in :mod:`sparkmq.remoting.serving`: their functions are this class's
methods, bound by name in its body (the same function objects in the class dict, so a read or a
request costs no call, frame or lookup more than when they were written here).
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, cast

from sparkmq.errors import RemoteError, SparkmqError
from sparkmq.protocol import RESPONSE_FLAG, FrameDecoder, RemotingCommand, ResponseCode, command
from sparkmq.remoting import read_paths, serving
from sparkmq.remoting.lanes import Lanes
from sparkmq.remoting.limits import MAX_IN_FLIGHT_REQUESTS, FrameBudget, ServerLimits
from sparkmq.remoting.spin import spinner_for
from sparkmq.remoting.turns import TurnGroups
from sparkmq.remoting.watchdog import Watchdog

logger = logging.getLogger(__name__)

# Servers and clients are long-lived and busy: the fast header codec from their first frame on.
command.load_fast_path()

WRITE_HIGH_WATER_BYTES = 8 * 1024 * 1024
_REMARK_CHARS = 300  # of an encoding failure quoted back to the peer

COALESCE_MAX_BYTES = 64 * 1024  # frames of one loop turn are held back for one write up to this much
DEADLINE_SWEEP_S = 0.05  # requests' deadlines are checked at most this often (one timer per connection)

RequestHandler = Callable[[RemotingCommand, "RemotingConnection"], Awaitable[RemotingCommand | None]]
#: What a request gets from a group handler: its response now, nothing (oneway), or an awaitable
#: of it (served by a Task; an asyncio Future is only given a callback).
Answer = RemotingCommand | None | Awaitable[RemotingCommand | None]
#: Serves the requests decoded from one read together, answering each (a server's dispatch).
GroupHandler = Callable[[list[RemotingCommand], "RemotingConnection"], list[Answer]]
#: Serves whole frames at the front of a read's buffer before they are decoded (a native lane):
#: ``lane(buffer, position, connection)`` answers them itself and returns the position after the
#: last frame it took (``position``: none; the decoder then serves them as usual). ``buffer`` is
#: the decoder's, or the read's own bytes when nothing was buffered before them.
FrameLane = Callable[[bytes | bytearray, int, "RemotingConnection"], int]


class RemotingConnection(asyncio.Protocol):
    """A framed, multiplexed remoting connection; ``handler`` serves the peer's requests.

    ``limits`` and ``budget`` (a server's) add the idle timeout, the frame deadline and the
    shared cap on unfinished frames; a client connection has none of them.
    """

    _ids = itertools.count(1)

    def __init__(
        self,
        handler: RequestHandler | None,
        on_close: Callable[[RemotingConnection], None] | None = None,
        *,
        limits: ServerLimits | None = None,
        budget: FrameBudget | None = None,
        group_handler: GroupHandler | None = None,
        lanes: Lanes | None = None,
        turns: TurnGroups | None = None,
    ) -> None:
        self.id = next(self._ids)
        self._lanes = lanes
        self._turns = turns if lanes is not None else None
        self._turn_waiting = False  # read bytes wait for the end of the loop turn (``turns``)
        # The read waiting for the turn's end when nothing was buffered before it: not copied into
        # the decoder unless the turn's lane leaves some of it (as _serve_read's lone read).
        self._held: bytes | None = None
        self._handler = handler
        self._group_handler = group_handler
        self._on_close = on_close
        self._decoder = FrameDecoder()
        self._inbox = self._decoder.front()[0]  # the decoder's one buffer: empty means nothing buffered
        self._transport: asyncio.Transport | None = None
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        # Requests whose waiters take a LeanResponse (or, for a header of another shape, the command)
        self._lean: dict[int, asyncio.Future[Any]] = {}
        self._tasks: set[asyncio.Future[Any]] = set()  # requests being served (Tasks or answer futures)
        # next_opaque() → 1, 2, ... 2**31 - 1, then 1 again (int32): a C call (no Python frame, no int but its own)
        self.next_opaque: Callable[[], int] = functools.partial(
            next, itertools.chain.from_iterable(itertools.repeat(range(1, 1 << 31)))
        )
        self._out: list[bytes | bytearray] = []  # frames of this loop turn, written together by _flush_out
        self._out_bytes = 0
        self._flush_scheduled = False
        self._receiving = False  # inside data_received: its responses go out in one write at its end
        # Request Tasks created but not yet started: while there are any, later requests become
        # Tasks too (the group handler would answer them first, out of arrival order).
        self._unstarted = 0
        self._read_blockers: set[str] = set()
        self._writable = asyncio.Event()
        self._writable.set()
        self._paused = False  # not self._writable.is_set(), read per read without a call
        self._closing_when_served = False
        self._limits = limits
        self._budget = budget
        self._charged = 0  # bytes of this connection's unfinished frame counted in the budget
        self._watchdog: Watchdog | None = None
        self._loop = asyncio.get_running_loop()
        self._spinner = spinner_for(self._loop)
        self.closed: asyncio.Future[None] = self._loop.create_future()
        self.peer: tuple[str, int] = ("0.0.0.0", 0)
        self.attributes: dict[str, Any] = {}  # per-connection state owned by processors
        self._deadlines: list[tuple[float, int, int, float]] = []  # heap of (when, opaque, code, timeout)
        self._sweeper: asyncio.Handle | None = None
        self._sweeper_when = 0.0

    # -- asyncio.Protocol ----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCPTransport has the whole interface but is no asyncio.Transport subclass
        transport = cast(asyncio.Transport, transport)
        self._transport = transport
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER_BYTES)
        peer = transport.get_extra_info("peername")
        if peer:
            self.peer = (str(peer[0]), int(peer[1]))
        if self._limits is not None and (self._limits.idle_timeout_s or self._limits.frame_deadline_s):
            self._watchdog = Watchdog(self, self._limits.idle_timeout_s, self._limits.frame_deadline_s)

    def data_received(self, data: bytes) -> None:
        if self._spinner is not None:
            self._spinner.touch()
        if self._closing_when_served:
            return
        if self._watchdog is not None:
            self._watchdog.activity()
        if self._turn_waiting:  # its turn's end serves these bytes too
            if self._held is not None:  # a second read this turn: both go into the decoder
                self._decoder.receive_data(self._held)
                self._held = None
            self._decoder.receive_data(data)
            return
        turns = self._turns
        if (
            turns is not None and turns.lone is not self and turns.defer(self)
        ):  # served at the turn's end, with the others'
            if self._inbox:
                self._decoder.receive_data(data)
            else:
                self._held = data
            self._turn_waiting = True
        elif self._lanes is not None and not self._inbox and not self._unstarted and not self._paused:
            self._serve_read(data, self._lanes)
        else:
            self._decoder.receive_data(data)  # raises only once failed, and a failed connection is closing
            self._serve_buffer(False)

    # -- reading (read_paths.py) and answering (serving.py): methods bound by name -----------
    _serve_read = read_paths._serve_read
    prepare_turn = read_paths.prepare_turn
    finish_turn = read_paths.finish_turn
    _serve_buffer = read_paths._serve_buffer
    _dispatch = read_paths._dispatch
    set_lanes = read_paths.set_lanes
    _serve_all = serving._serve_all
    _serve_when_writable = serving._serve_when_writable
    _deliver = serving._deliver
    _step = serving._step
    _answered = serving._answered
    _serve = serving._serve
    _finish = serving._finish

    def eof_received(self) -> bool:
        # The peer finished sending: answer what it asked, then close (True keeps writing open;
        # TLS cannot half-close, and asyncio warns on a True from a TLS transport).
        self._close_when_served()
        return self._transport is None or self._transport.get_extra_info("sslcontext") is None

    def pause_writing(self) -> None:
        # The peer is not reading: stop reading its requests until it catches up.
        self._writable.clear()
        self._paused = True
        self._block_reading("writes")

    def resume_writing(self) -> None:
        if self._watchdog is not None:
            self._watchdog.activity()  # the peer took our bytes: progress
        self._writable.set()
        self._paused = False
        self._unblock_reading("writes")

    def connection_lost(self, exc: Exception | None) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        for future in (*self._pending.values(), *self._lean.values()):
            if not future.done():
                future.set_exception(RemoteError(f"connection to {self.peer[0]}:{self.peer[1]} closed", retriable=True))
        self._pending.clear()
        self._lean.clear()
        self._writable.set()  # requests waiting to be served go on and find the connection closed
        self._paused = False
        if self._watchdog is not None:
            self._watchdog.cancel()
        self._release_budget()
        if not self.closed.done():
            self.closed.set_result(None)
        if self._on_close is not None:
            self._on_close(self)

    # -- flow control ----------------------------------------------------------------------
    def _account_unfinished_frame(self, decoded: bool) -> None:
        buffered = self._decoder.buffered_bytes
        if self._watchdog is not None:
            self._watchdog.frame_progress(buffered, decoded)
        if self._budget is None or buffered == self._charged:
            return
        delta, self._charged = buffered - self._charged, buffered
        if not self._budget.charge(delta):
            logger.warning(
                "closing connection %s from %s:%d: unfinished frames of all connections hold %d bytes,"
                " over the cap of %d",
                self.id,
                *self.peer,
                self._budget.used,
                self._budget.limit,
            )
            self._release_budget()
            self.close()

    def _release_budget(self) -> None:
        if self._budget is not None and self._charged:
            self._budget.charge(-self._charged)
            self._charged = 0

    def _close_when_served(self) -> None:
        """Stop reading; close once every request already decoded has been answered."""
        self._closing_when_served = True
        self._release_budget()
        self._block_reading("failed")
        if not self._tasks and not self._turn_waiting:  # a waiting turn closes it once served
            self.close()

    def _block_reading(self, reason: str) -> None:
        if not self._read_blockers and self._transport is not None and not self._transport.is_closing():
            self._transport.pause_reading()
        self._read_blockers.add(reason)

    def _unblock_reading(self, reason: str) -> None:
        if reason not in self._read_blockers:
            return
        self._read_blockers.discard(reason)
        if not self._read_blockers and self._transport is not None and not self._transport.is_closing():
            self._transport.resume_reading()

    @property
    def reading_paused(self) -> bool:
        """True while this connection does not read (too many in flight, peer not reading, failed)."""
        return bool(self._read_blockers)

    @property
    def writes_paused(self) -> bool:
        """True while the peer does not take our responses (over the write high-water mark)."""
        return not self._writable.is_set()

    @property
    def backlogged(self) -> bool:
        """True once the peer has not taken a high-water mark of our responses: writes are paused,
        or about to be (uvloop tells ``pause_writing`` only at the end of the loop turn)."""
        return self.writes_paused or self.write_buffer_bytes + self._out_bytes >= WRITE_HIGH_WATER_BYTES

    @property
    def write_buffer_bytes(self) -> int:
        """Bytes written but not yet taken by the kernel (bounded by the pause above)."""
        return 0 if self._transport is None else self._transport.get_write_buffer_size()

    # -- requests in flight ----------------------------------------------------------------
    def _task_done(self, task: asyncio.Future[Any]) -> None:
        self._tasks.discard(task)
        if len(self._tasks) < MAX_IN_FLIGHT_REQUESTS // 2:
            self._unblock_reading("in-flight")
        if self._closing_when_served and not self._tasks and not self._turn_waiting:
            self.close()

    # -- sending ---------------------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        """Requests from the peer still being served."""
        return len(self._tasks)

    @property
    def is_open(self) -> bool:
        return self._transport is not None and not self._transport.is_closing()

    def send(self, command: RemotingCommand) -> None:
        """Write a command; dropped if the connection is closed.

        A response that cannot be encoded (a frame over the maximum, a bad field) is logged and
        replaced by a SYSTEM_ERROR response with the same opaque: every request gets an answer.
        """
        if not self.is_open:
            return
        assert self._transport is not None
        try:
            head, body = command.encode_parts()
        except (SparkmqError, ValueError, TypeError) as exc:
            if not command.is_response:
                raise
            logger.exception("response code %d to %s:%d cannot be encoded", command.code, *self.peer)
            remark = f"the response could not be encoded: {type(exc).__name__}: {exc}"[:_REMARK_CHARS]
            head, body = RemotingCommand(
                code=ResponseCode.SYSTEM_ERROR, opaque=command.opaque, flag=RESPONSE_FLAG, remark=remark
            ).encode_parts()
        self.write_frame(head, body)

    def write_frame(self, head: bytes | bytearray, body: bytes = b"", *, at_once: bool = False) -> None:
        """Write an encoded frame (``head`` as ``RemotingCommand.encode_parts`` gives it, then ``body``);
        dropped if the connection is closed.

        ``at_once`` (a request with no other in flight, or a read's lane answers, which come first
        in its write): when no frame of this loop turn waits, write now instead of at the turn's
        (or the read's) end, saving a loop turn or the coalescing steps per request.
        """
        transport = self._transport
        if transport is None or transport.is_closing():  # not self.is_open, without its call
            return
        if self._watchdog is not None and not self._receiving:  # a read (or resume_writing) just recorded it
            self._watchdog.activity()
        if at_once and not self._out:
            if body:
                transport.writelines((head, body))
            else:
                transport.write(head)
            return
        # Frames written in one loop turn leave in one writelines (one syscall, not one per frame):
        # under pipelining most of a server's and a client's CPU per request was these writes.
        self._out.append(head)
        self._out_bytes += len(head) + len(body)
        if body:
            self._out.append(body)
        if self._out_bytes >= COALESCE_MAX_BYTES or self.writes_paused:
            self._flush_out()  # big frames go at once, so the transport's write back-pressure sees them
        elif not self._flush_scheduled and not self._receiving:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush_out)

    def _flush_out(self) -> None:
        self._flush_scheduled = False
        out, self._out, self._out_bytes = self._out, [], 0
        if out and self._transport is not None and not self._transport.is_closing():
            if len(out) == 1:  # a lane's answers: one bytes object (writelines would build a list walk)
                self._transport.write(out[0])
            else:
                self._transport.writelines(out)

    def write_when_done(self, frames: asyncio.Future[bytes]) -> None:
        """Write the encoded frames ``frames`` resolves to (answers a lane encoded) once it is done;
        they count as in flight until then, so a half-closed connection waits for them. The future
        must resolve to bytes: a failure is logged and those requests stay unanswered."""

        def done(future: asyncio.Future[bytes]) -> None:
            if future.cancelled():
                pass
            elif (exc := future.exception()) is not None:
                logger.error("answers to %s:%d could not be encoded", *self.peer, exc_info=exc)
            else:
                self.write_frame(future.result())
            self._task_done(future)  # after the write: a connection closing when served sends it first

        frames.add_done_callback(done)
        self._tasks.add(frames)

    async def request(self, command: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send a request and wait for the response with the same opaque.

        Deadlines wait in a heap swept by one timer per connection (RocketMQ's
        ``scanResponseTable``), not a timer per request; a request fails at most
        ``DEADLINE_SWEEP_S`` after its deadline. (Not ``asyncio.wait_for``: that costs timers and
        callbacks per request, and on Python 3.11 it can swallow a cancellation that races its timeout.)
        """
        if not self.is_open:
            raise RemoteError(f"connection to {self.peer[0]}:{self.peer[1]} is closed", retriable=True)
        head, body = command.encode_parts()
        return await self.request_frame(command.opaque, command.code, head, body, timeout)

    async def request_frame(self, opaque: int, code: int, head: bytes, body: bytes, timeout: float) -> RemotingCommand:
        """``request`` for a frame the caller encoded itself (a producer's per-queue header template)."""
        if not self.is_open:
            raise RemoteError(f"connection to {self.peer[0]}:{self.peer[1]} is closed", retriable=True)
        future: asyncio.Future[RemotingCommand] = self._loop.create_future()
        self._pending[opaque] = future
        self._add_deadline(opaque, code, timeout)
        self.write_frame(head, body, at_once=len(self._pending) + len(self._lean) == 1)
        try:
            return await future
        finally:
            self._pending.pop(opaque, None)

    def request_lean(self, opaque: int, code: int, frame: bytes, timeout: float) -> asyncio.Future[Any]:
        """Send a whole encoded request frame; the future gets its response as a
        :class:`~sparkmq.remoting.client_connection.LeanResponse` (or the :class:`RemotingCommand` of a header
        that is not of the plain shape), fails with :class:`RemoteError` at the deadline or when
        the connection closes. No coroutine, no Task: the caller awaits the future itself and,
        if it stops waiting early (cancelled), calls :meth:`forget`.
        """
        if not self.is_open:
            raise RemoteError(f"connection to {self.peer[0]}:{self.peer[1]} is closed", retriable=True)
        future: asyncio.Future[Any] = self._loop.create_future()
        self._lean[opaque] = future
        self._add_deadline(opaque, code, timeout)
        self.write_frame(frame, at_once=len(self._lean) + len(self._pending) == 1)
        return future

    def forget(self, opaque: int) -> None:
        """Drop a :meth:`request_lean` waiter nobody awaits any more."""
        self._lean.pop(opaque, None)

    def _add_deadline(self, opaque: int, code: int, timeout: float) -> None:
        when = self._loop.time() + timeout
        heapq.heappush(self._deadlines, (when, opaque, code, timeout))
        if self._sweeper is None or when < self._sweeper_when:
            self._arm_sweeper(when)

    def _arm_sweeper(self, when: float) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        # uvloop answers a call_at due within a millisecond with a plain Handle (no .when()): keep the time here
        self._sweeper, self._sweeper_when = self._loop.call_at(when, self._sweep), when

    def _sweep(self) -> None:
        """Fail the requests past their deadline; entries of answered requests are just dropped."""
        self._sweeper = None
        now, deadlines = self._loop.time(), self._deadlines
        while deadlines and deadlines[0][0] <= now:
            _, opaque, code, timeout = heapq.heappop(deadlines)
            future = self._pending.get(opaque) or self._lean.pop(opaque, None)
            if future is not None and not future.done():
                future.set_exception(
                    RemoteError(
                        f"request code {code} to {self.peer[0]}:{self.peer[1]} timed out after {timeout} s",
                        retriable=True,
                    )
                )
        if deadlines:
            self._arm_sweeper(max(deadlines[0][0], now + DEADLINE_SWEEP_S))

    def close(self) -> None:
        """Close after the buffered writes are flushed; abort at once if the peer is not reading them."""
        if self._transport is not None and not self._transport.is_closing():
            self._flush_out()  # frames sent this turn go before the close
            if self.writes_paused:
                self._transport.abort()
            else:
                self._transport.close()

    async def wait_closed(self) -> None:
        await self.closed
