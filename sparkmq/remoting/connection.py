"""RemotingConnection: one TCP connection speaking the remoting protocol, either side.

Requests are served concurrently (a parked PULL must not block a SEND on the same socket);
responses complete the caller's future by opaque. A protocol violation closes only this
connection. The server and the client both use this class; they differ in who connects.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from sparkmq.errors import ProtocolError, RemoteError, SparkmqError
from sparkmq.protocol import FrameDecoder, RemotingCommand, ResponseCode

logger = logging.getLogger(__name__)

MAX_IN_FLIGHT_REQUESTS = 1024  # per connection; reading pauses above it (bounded buffering)
WRITE_HIGH_WATER_BYTES = 8 * 1024 * 1024

RequestHandler = Callable[[RemotingCommand, "RemotingConnection"], Awaitable[RemotingCommand | None]]


class RemotingConnection(asyncio.Protocol):
    """A framed, multiplexed remoting connection; ``handler`` serves the peer's requests."""

    _ids = itertools.count(1)

    def __init__(self, handler: RequestHandler | None, on_close: Callable[[RemotingConnection], None] | None = None) -> None:
        self.id = next(self._ids)
        self._handler = handler
        self._on_close = on_close
        self._decoder = FrameDecoder()
        self._transport: asyncio.Transport | None = None
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._opaques = itertools.count(1)
        self._paused = False
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.peer: tuple[str, int] = ("0.0.0.0", 0)
        self.attributes: dict[str, Any] = {}  # per-connection state owned by processors

    # -- asyncio.Protocol ----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER_BYTES)
        peer = transport.get_extra_info("peername")
        if peer:
            self.peer = (str(peer[0]), int(peer[1]))

    def data_received(self, data: bytes) -> None:
        try:
            commands = self._decoder.feed(data)
        except ProtocolError as exc:
            logger.warning("closing connection %s from %s:%d: %s", self.id, *self.peer, exc.remark)
            self.close()
            return
        for command in commands:
            if command.is_response:
                future = self._pending.pop(command.opaque, None)
                if future is not None and not future.done():
                    future.set_result(command)
            elif self._handler is not None:
                task = asyncio.get_running_loop().create_task(self._serve(command))
                self._tasks.add(task)
                task.add_done_callback(self._task_done)
        if len(self._tasks) >= MAX_IN_FLIGHT_REQUESTS and self._transport is not None and not self._paused:
            self._paused = True
            self._transport.pause_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        for future in self._pending.values():
            if not future.done():
                future.set_exception(RemoteError(f"connection to {self.peer[0]}:{self.peer[1]} closed", retriable=True))
        self._pending.clear()
        if not self.closed.done():
            self.closed.set_result(None)
        if self._on_close is not None:
            self._on_close(self)

    # -- serving ---------------------------------------------------------------------------
    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if self._paused and len(self._tasks) < MAX_IN_FLIGHT_REQUESTS // 2 and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()

    async def _serve(self, request: RemotingCommand) -> None:
        assert self._handler is not None
        try:
            response = await self._handler(request, self)
        except SparkmqError as exc:
            response = request.make_response(exc.code, remark=exc.remark)
        except Exception as exc:  # a processor bug answers SYSTEM_ERROR and is logged with its traceback
            logger.exception("request code %d from %s:%d failed", request.code, *self.peer)
            response = request.make_response(ResponseCode.SYSTEM_ERROR, remark=f"{type(exc).__name__}: {exc}")
        if response is not None and not request.is_oneway:
            self.send(response)

    # -- sending ---------------------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        """Requests from the peer still being served."""
        return len(self._tasks)

    @property
    def is_open(self) -> bool:
        return self._transport is not None and not self._transport.is_closing()

    def send(self, command: RemotingCommand) -> None:
        """Write a command (response or oneway request); dropped if the connection is closed."""
        if not self.is_open:
            return
        assert self._transport is not None
        head, body = command.encode_parts()
        if body:
            self._transport.writelines((head, body))
        else:
            self._transport.write(head)

    def next_opaque(self) -> int:
        return next(self._opaques) & 0x7FFFFFFF

    async def request(self, command: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send a request and wait for the response with the same opaque."""
        if not self.is_open:
            raise RemoteError(f"connection to {self.peer[0]}:{self.peer[1]} is closed", retriable=True)
        future: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._pending[command.opaque] = future
        self.send(command)
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError as exc:
            raise RemoteError(f"request code {command.code} to {self.peer[0]}:{self.peer[1]} timed out after {timeout} s",
                              retriable=True) from exc
        finally:
            self._pending.pop(command.opaque, None)

    def close(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()

    async def wait_closed(self) -> None:
        await self.closed
