"""The client's connection: responses to :meth:`~RemotingConnection.request_lean` skip the command object.

A producer's send gets one small answer per request: a JSON header with ``code``, ``opaque``,
``flag``, maybe ``remark``, and ``extFields`` (no body). :class:`ClientConnection` reads such
frames with the one typed msgspec decode of :mod:`sparkmq.protocol.plain_header` (the decode the
reference path tries first) and completes the waiting future with that ``LeanResponse``
(``PlainHeader``, and a send answer's ``msg_id`` and ``queue_offset``), or with the C split's ``Answer`` of
the same fields: no ``RemotingCommand``, no frame-decoder bookkeeping per frame.

Sending is lean too: :meth:`ClientConnection.send_lean` registers any waiter with ``done``,
``set_result`` and ``set_exception`` (an asyncio future, or a producer's own callback object) and
appends the frame to the loop turn's coalesced write, which goes out in chunks of
:data:`LEAN_CHUNK_FRAMES` during the turn (and the rest at its end). Its deadline joins a group: the
requests of one timeout and request code sent within ``DEADLINE_SWEEP_S`` of the group's first share one
entry (its due time, the first's deadline plus that slack, and a list of opaques) in a first-in-first-out
queue per timeout; the connection's one sweeper timer fails what is still unanswered in a group once it
is due, and drops groups whose requests were all answered. Per send that is a comparison and a list
append, not a deadline entry pushed and popped; a request fails never before its deadline and at most
twice ``DEADLINE_SWEEP_S`` after it.

Requests first: a read writes the requests still waiting for their turn's end before it reads its answers.
uvloop runs a callback scheduled during a turn (the coalesced write's) only after its next poll, whose reads
come first: the requests a turn made would wait while the client parses the answers to the previous ones, and
the broker, having answered those, would idle meanwhile; so client and broker took turns.

Only the plain case takes this path: a whole, bodiless JSON frame at the start of a read (or
after the previous read's lean frames) of the plain shape, a response, awaited through
``request_lean``.
From the first frame that is anything else (a request from the broker, a body, a ROCKETMQ
binary header, a bad length, a header of another shape) the rest of the read goes to the
reference :class:`~sparkmq.protocol.FrameDecoder` path of :class:`RemotingConnection`, which
decodes or rejects it exactly as before (a ``request_lean`` waiter then gets the command).
"""

from __future__ import annotations

import asyncio
import struct
from asyncio import InvalidStateError
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from sparkmq.errors import RemoteError
from sparkmq.native import extension
from sparkmq.protocol import RESPONSE_FLAG
from sparkmq.protocol.codes import HEADER_LENGTH_FIELD_BYTES, MIN_FRAME_LENGTH
from sparkmq.remoting.connection import COALESCE_MAX_BYTES, DEADLINE_SWEEP_S, RemotingConnection
from sparkmq.remoting.spin import client_spinner_for

try:
    from sparkmq.protocol.plain_header import PLAIN_HEADER_ERRORS, PlainHeader, plain_decoder

    class LeanResponse(PlainHeader):
        """A response's plain header, and a send answer's two extFields values (None when absent): the C split's
        ``Answer`` has the same."""

        @property
        def msg_id(self) -> str | None:
            return None if self.ext_fields is None else self.ext_fields.get("msgId")

        @property
        def queue_offset(self) -> str | None:
            return None if self.ext_fields is None else self.ext_fields.get("queueOffset")

    decode_plain_header: Callable[[bytes], LeanResponse] | None = plain_decoder(LeanResponse)
except ImportError:  # msgspec is missing: every response takes the reference path
    decode_plain_header = None
    LeanResponse = None  # type: ignore[assignment,misc]

# native/clientframes.c: a read's leading plain answers split in one call; the loop below is its reference
_native = extension("sparkmq.native._clientframes")

__all__ = ["LEAN_ANSWERS", "LEAN_BUSY_FRAMES", "LEAN_CHUNK_FRAMES", "ClientConnection", "LeanResponse", "LeanWaiter"]

#: The types of a lean answer: the C split's ``Answer`` (a read-only record of a ``LeanResponse``'s fields, by
#: name and in order) and the Python path's ``LeanResponse``.
LEAN_ANSWERS: tuple[type, ...] = tuple(kind for kind in (getattr(_native, "Answer", None), LeanResponse) if kind)

#: Lean requests sent close together with one timeout and request code: (due, code, timeout, opaques).
LeanGroup = tuple[float, int, float, list[int]]

# length prefix, then serializeType << 24 | header length: a JSON header (type 0) reads as its length
_PREFIX = struct.Struct(">II")
_PREFIX_BYTES = _PREFIX.size
MAX_TAIL_BYTES = 64 * 1024  # an unfinished lean frame is kept aside up to this size; longer ones are not lean
_LENGTH = struct.Struct(">I")
_LENGTH_BYTES = _LENGTH.size
_LEAN_LENGTHS = (MIN_FRAME_LENGTH, MAX_TAIL_BYTES)  # a length prefix outside goes to the reference decoder
#: Lean requests of one loop turn are written in chunks of this many frames, not all at the turn's end: the
#: broker starts on the first chunk while the rest are being built, and its answers are waiting when the
#: turn ends, so client and broker work at once instead of taking turns (docs/design-notes.md, "Chunked
#: writes"). 128 in flight make two such groups; a smaller chunk costs each side a write or read more.
LEAN_CHUNK_FRAMES = 64
#: ... unless this many written requests are still unanswered: the broker has work, a chunk more would only
#: cost it a read more (and the turn's tail a write of its own); the turn's frames then go out at its end.
LEAN_BUSY_FRAMES = LEAN_CHUNK_FRAMES // 2


def _frames_end(data: bytes, count: int) -> int:
    """Where the first ``count`` frames of ``data`` (whole ones) end."""
    position = 0
    for _ in range(count):
        position += _PREFIX_BYTES + _LENGTH.unpack_from(data, position + _LENGTH_BYTES)[0]
    return position


class LeanWaiter(Protocol):
    """What waits for a lean request's answer: an asyncio future has this shape."""

    def done(self) -> bool: ...

    def set_result(self, result: Any, /) -> None: ...

    def set_exception(self, exception: BaseException, /) -> None: ...


class ClientConnection(RemotingConnection):
    """A :class:`RemotingConnection` whose lean requests and responses skip the ``RemotingCommand``."""

    _tail = b""  # the start of a lean frame the last read ended in

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._spinner = client_spinner_for(self._loop)  # a client spins only when asked to (spin.py)
        # timeout → the groups of lean requests' deadlines, oldest first (due times in order)
        self._lean_groups: dict[float, deque[LeanGroup]] = {}
        # the group sends join: its due time, timeout, request code and opaques
        self._group_due, self._group_timeout, self._group_code = -1.0, -1.0, -1
        self._group: list[int] = []
        # the turn's bytes send_lean holds back: COALESCE_MAX_BYTES, 0 while the transport's writes are paused (one
        # check per send for both)
        self._out_limit = COALESCE_MAX_BYTES
        #: ``is_open`` as a plain attribute, read per send: False from ``close`` or the loss on (a transport closing
        #: by itself is lost in its next loop turn, which fails what was sent meanwhile)
        self.open = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.open = True

    def close(self) -> None:
        self.open = False
        super().close()

    def pause_writing(self) -> None:
        super().pause_writing()
        self._out_limit = 0

    def resume_writing(self) -> None:
        super().resume_writing()
        self._out_limit = COALESCE_MAX_BYTES

    def connection_lost(self, exc: Exception | None) -> None:
        self.open = False
        self._out_limit = COALESCE_MAX_BYTES  # as the base sets its event: what waits goes on and finds it closed
        super().connection_lost(exc)

    def request_lean(self, opaque: int, code: int, frame: bytes, timeout: float) -> asyncio.Future[Any]:
        """Send a whole encoded request frame; the future gets its response as a :class:`LeanResponse`, or the
        :class:`~sparkmq.protocol.RemotingCommand` of a header that is not of the plain shape;
        fails with :class:`RemoteError` at the deadline or when the connection closes. No coroutine,
        no Task: the caller awaits the future itself and, if it stops waiting early, calls :meth:`forget`.
        """
        if not self.is_open:
            raise RemoteError(f"connection to {self.peer[0]}:{self.peer[1]} is closed", retriable=True)
        future: asyncio.Future[Any] = self._loop.create_future()
        self.send_lean(opaque, code, frame, future, timeout)
        return future

    def create_future(self) -> asyncio.Future[Any]:
        """A future of the connection's loop (the running one, without ``asyncio.get_running_loop``'s getpid)."""
        return self._loop.create_future()

    def send_lean(self, opaque: int, code: int, frame: bytes, waiter: LeanWaiter, timeout: float) -> float:
        """:meth:`request_lean` with the caller's own ``waiter``, on a connection the caller saw open:
        ``waiter.set_result`` gets the answer (called inside the read), ``set_exception`` the
        :class:`RemoteError` of a deadline passed or a connection lost. Returns the loop's time (``loop.time()``,
        a monotonic clock's, as of the loop's turn)."""
        lean: dict[int, LeanWaiter] = self._lean  # type: ignore[assignment]  # the base's table, typed for its futures
        lean[opaque] = waiter
        now = self._loop.time()
        if now + timeout <= self._group_due and timeout == self._group_timeout and code == self._group_code:
            self._group.append(opaque)
        else:
            self._new_group(opaque, code, now + timeout, timeout)
        out = self._out
        if not out and len(lean) == 1 and not self._pending:
            assert self._transport is not None
            self._transport.write(frame)  # the only request in flight: now, not at the turn's end
            return now
        out.append(frame)
        self._out_bytes += len(frame)
        if (
            len(out) >= LEAN_CHUNK_FRAMES and len(lean) - len(out) < LEAN_BUSY_FRAMES
        ) or self._out_bytes >= self._out_limit:
            self._flush_out()
        elif not self._flush_scheduled and not self._receiving:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush_out)
        return now

    def _new_group(self, opaque: int, code: int, when: float, timeout: float) -> None:
        """Open a deadline group for the request ``opaque`` due ``when``; groups all answered leave the front."""
        groups = self._lean_groups.get(timeout)
        if groups is None:
            groups = self._lean_groups[timeout] = deque()
        lean = self._lean
        while groups and not any(map(lean.__contains__, groups[0][3])):
            groups.popleft()
        due = when + DEADLINE_SWEEP_S
        self._group = [opaque]
        self._group_due, self._group_timeout, self._group_code = due, timeout, code
        groups.append((due, code, timeout, self._group))
        if self._sweeper is None or due < self._sweeper_when:
            self._arm_sweeper(due)

    def _sweep(self) -> None:
        super()._sweep()  # the general requests' heap; then the lean groups
        now, lean, soonest = self._loop.time(), self._lean, None
        # snapshots: a failed waiter's callback may send, and a new timeout adds a queue
        for groups in list(self._lean_groups.values()):
            while groups and (groups[0][0] <= now or not any(map(lean.__contains__, groups[0][3]))):
                _, code, timeout, opaques = groups.popleft()  # due, or all answered already
                if opaques is self._group:
                    self._group_due = -1.0  # the next send opens a group of its own
                for opaque in opaques:
                    waiter = lean.pop(opaque, None)
                    if waiter is not None and not waiter.done():
                        waiter.set_exception(
                            RemoteError(
                                f"request code {code} to {self.peer[0]}:{self.peer[1]} timed out after {timeout} s",
                                retriable=True,
                            )
                        )
            if groups and (soonest is None or groups[0][0] < soonest):
                soonest = groups[0][0]
        if soonest is not None and (self._sweeper is None or soonest < self._sweeper_when):
            self._arm_sweeper(max(soonest, now + DEADLINE_SWEEP_S))

    def data_received(self, data: bytes) -> None:
        if self._spinner is not None:
            self._spinner.touch()
        if self._out:  # the turn's requests leave before these answers are read (the module's "Requests first")
            self._flush_out()
        lean = self._lean
        if not lean or self._closing_when_served or self._decoder.buffered_bytes or decode_plain_header is None:
            if self._tail:
                data, self._tail = self._tail + data, b""
            super().data_received(data)
            return
        if self._tail:
            data, self._tail = self._tail + data, b""
        position, size = 0, len(data)
        if _native is not None:
            end, taken = _native.answers(data, 0)  # each answer's fields, in order, read as a LeanResponse's
            for answer in taken:
                future = lean.pop(answer.opaque, None)
                if future is None:  # not awaited here: the reference path's, from this answer's frame on
                    end = _frames_end(data, next(i for i, other in enumerate(taken) if other is answer))
                    break
                try:  # noqa: SIM105 - a try costs nothing per answer, a done() call or a with would
                    future.set_result(answer)
                except InvalidStateError:  # cancelled by its caller meanwhile
                    pass
            position = end
        while True:
            if size - position < _PREFIX_BYTES:
                if (
                    size - position >= _LENGTH_BYTES
                    and not _LEAN_LENGTHS[0] <= _LENGTH.unpack_from(data, position)[0] <= _LEAN_LENGTHS[1]
                ):
                    break  # a bad length prefix is rejected as soon as it arrives, by the reference path
                if position < size:
                    self._tail = data[position:]
                return
            length, header_length = _PREFIX.unpack_from(data, position)
            end = position + _PREFIX_BYTES + header_length
            if length != HEADER_LENGTH_FIELD_BYTES + header_length:
                break  # a body, a binary header or a bad length: the reference path's
            if end > size:
                if end - position <= MAX_TAIL_BYTES:
                    self._tail = data[position:]
                    return
                break
            try:
                response = decode_plain_header(data[position + _PREFIX_BYTES : end])
            except PLAIN_HEADER_ERRORS:
                break
            if not response.flag & RESPONSE_FLAG:
                break
            future = lean.pop(response.opaque, None)
            if future is None:
                break  # not awaited through request_lean (or already timed out): the reference path's
            if not future.done():
                future.set_result(response)
            position = end
        super().data_received(data[position:] if position else data)
