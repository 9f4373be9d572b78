"""RemotingServer: accepts connections and dispatches requests by code to processors."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from sparkmq.protocol import RemotingCommand, ResponseCode, code_name
from sparkmq.remoting.connection import RemotingConnection

logger = logging.getLogger(__name__)

Processor = Callable[[RemotingCommand, RemotingConnection], Awaitable[RemotingCommand | None]]


class RemotingServer:
    """A TCP server on ``host:port`` (0 = a free port); ``register`` maps codes to processors.

    >>> # server = RemotingServer("127.0.0.1", 0); server.register(RequestCode.HEART_BEAT, on_heartbeat)
    >>> # await server.start(); ...; await server.close()
    """

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self._processors: dict[int, Processor] = {}
        self._connections: set[RemotingConnection] = set()
        self._close_listeners: list[Callable[[RemotingConnection], None]] = []
        self._server: asyncio.Server | None = None

    def register(self, code: int, processor: Processor) -> None:
        self._processors[int(code)] = processor

    def on_connection_closed(self, listener: Callable[[RemotingConnection], None]) -> None:
        """Call ``listener(connection)`` when any client connection closes."""
        self._close_listeners.append(listener)

    @property
    def connections(self) -> frozenset[RemotingConnection]:
        return frozenset(self._connections)

    async def _dispatch(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand | None:
        processor = self._processors.get(request.code)
        if processor is None:
            return request.make_response(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED, remark=f"request type {request.code} ({code_name(request.code, response=False)}) not supported"
            )
        return await processor(request, connection)

    def _connection_closed(self, connection: RemotingConnection) -> None:
        self._connections.discard(connection)
        for listener in self._close_listeners:
            listener(connection)

    def _new_connection(self) -> RemotingConnection:
        connection = RemotingConnection(self._dispatch, self._connection_closed)
        self._connections.add(connection)
        return connection

    async def start(self, serve: bool = True) -> int:
        """Bind (and with ``serve`` accept connections); return the bound port."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._new_connection, self.host, self.port, reuse_address=True,
                                                start_serving=serve)
        self.port = self._server.sockets[0].getsockname()[1]
        logger.info("remoting server bound to %s:%d", self.host, self.port)
        return self.port

    async def start_serving(self) -> None:
        """Accept connections on a server bound with ``start(serve=False)``."""
        assert self._server is not None
        await self._server.start_serving()

    def stop_accepting(self) -> None:
        if self._server is not None:
            self._server.close()

    async def close(self) -> None:
        """Stop accepting and close every connection."""
        self.stop_accepting()
        for connection in list(self._connections):
            connection.close()
        for connection in list(self._connections):
            await connection.wait_closed()
        if self._server is not None:
            await self._server.wait_closed()
