"""RemotingClient: one connection per address, requests matched to responses by opaque."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from ssl import SSLContext

from sparkmq.errors import RemoteError
from sparkmq.protocol import RemotingCommand
from sparkmq.remoting.client_connection import ClientConnection
from sparkmq.remoting.connection import RemotingConnection, RequestHandler

DEFAULT_TIMEOUT_S = 3.0
CONNECT_TIMEOUT_S = 3.0
#: Adds fields to every request before it leaves (ACL 1.0 signing: ``SessionCredentials.sign``).
Signer = Callable[[dict[str, str] | None, bytes], dict[str, str]]


def split_address(address: str) -> tuple[str, int]:
    """``"host:port"`` → (host, port).

    >>> split_address("127.0.0.1:9876")
    ('127.0.0.1', 9876)
    """
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise RemoteError(f"address {address!r} is not host:port")
    return host, int(port)


class RemotingClient:
    """Connections to brokers / NameServers; ``handler`` serves requests they send back.

    ``signer`` (RocketMQ's RPC hook) rewrites every request's extFields, e.g. to sign them;
    ``ssl`` makes every connection TLS.
    """

    def __init__(
        self,
        handler: RequestHandler | None = None,
        on_close: Callable[[str], None] | None = None,
        *,
        signer: Signer | None = None,
        ssl: SSLContext | None = None,
    ) -> None:
        self._handler = handler
        self._on_close = on_close
        self.signer = signer
        self._ssl = ssl
        self._connections: dict[str, RemotingConnection] = {}
        self._connecting: dict[str, asyncio.Future[RemotingConnection]] = {}

    async def connection(self, address: str) -> RemotingConnection:
        """The open connection to ``address``, connecting if needed (one per address)."""
        existing = self._connections.get(address)
        if existing is not None and existing.is_open:
            return existing
        pending = self._connecting.get(address)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[RemotingConnection] = asyncio.get_running_loop().create_future()
        self._connecting[address] = future
        try:
            connection = await self._connect(address)
            self._connections[address] = connection
            future.set_result(connection)
            return connection
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved here so a lone waiter-less failure is not reported twice
            raise
        finally:
            self._connecting.pop(address, None)

    async def _connect(self, address: str) -> RemotingConnection:
        host, port = split_address(address)
        loop = asyncio.get_running_loop()

        def closed(connection: RemotingConnection) -> None:
            if self._connections.get(address) is connection:
                del self._connections[address]
            if self._on_close is not None:
                self._on_close(address)

        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):  # not wait_for: on 3.11 it can swallow a cancel
                _transport, connection = await loop.create_connection(
                    lambda: ClientConnection(self._handler, closed),
                    host,
                    port,
                    ssl=self._ssl,
                    server_hostname=host if self._ssl is not None else None,
                )
        except (OSError, TimeoutError) as exc:
            raise RemoteError(f"cannot connect to {address}: {exc}", retriable=True) from exc
        return connection

    async def invoke(
        self,
        address: str,
        code: int,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> RemotingCommand:
        """Send a request to ``address`` and return its response."""
        connection = await self.connection(address)
        if self.signer is not None:
            ext_fields = self.signer(ext_fields, body)
        request = RemotingCommand.request(code, connection.next_opaque(), ext_fields=ext_fields, body=body)
        return await connection.request(request, timeout)

    async def invoke_oneway(
        self, address: str, code: int, ext_fields: dict[str, str] | None = None, body: bytes = b""
    ) -> None:
        """Send a request that expects no response."""
        connection = await self.connection(address)
        if self.signer is not None:
            ext_fields = self.signer(ext_fields, body)
        connection.send(
            RemotingCommand.request(code, connection.next_opaque(), ext_fields=ext_fields, body=body, oneway=True)
        )

    async def close(self) -> None:
        connections = list(self._connections.values())
        self._connections.clear()
        for connection in connections:
            connection.close()
        for connection in connections:
            await connection.wait_closed()
