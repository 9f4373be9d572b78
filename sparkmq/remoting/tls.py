"""TLS for the remoting protocol with Python's :mod:`ssl`, in RocketMQ's server modes.

* ``enforcing``: every connection must start a TLS handshake (``create_server(ssl=...)``).
* ``permissive``: TLS and plain clients on the same port. Each accepted socket is peeked at
  (``MSG_PEEK``, nothing consumed) before asyncio owns it: a TLS record starts with the
  handshake content type 0x16, while a remoting frame starts with the high byte of its length,
  which is 0x00 for every frame under the 16 MiB cap. The socket then goes to
  ``loop.connect_accepted_socket`` with or without the SSL context.

:func:`server_context` and :func:`client_context` build the contexts from PEM files
(``tls.server.certPath`` / ``tls.server.keyPath``; ``tls.client.trustCertPath``).

>>> # tls = ServerTls(server_context(Path("cert.pem"), Path("key.pem")), "permissive")
>>> # server = RemotingServer("127.0.0.1", 0, tls=tls)
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)
TLS_HANDSHAKE_RECORD = 0x16  # ContentType.handshake: the first byte of a ClientHello
FIRST_BYTE_TIMEOUT_S = 30.0  # a permissive accept waits this long for the peer's first byte
SERVER_MODES = ("permissive", "enforcing")


@dataclass(frozen=True)
class ServerTls:
    """A server's TLS: its context and ``mode`` (permissive: TLS or plain; enforcing: TLS only)."""

    context: ssl.SSLContext
    mode: str = "permissive"

    def __post_init__(self) -> None:
        if self.mode not in SERVER_MODES:
            raise ValueError(f"TLS server mode {self.mode!r} is not one of {', '.join(SERVER_MODES)}")


def server_context(cert_path: Path, key_path: Path) -> ssl.SSLContext:
    """A TLS server context from a PEM certificate (chain) and its unencrypted PEM key."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_path, key_path)
    return context


def client_context(trust_cert_path: Path | None = None) -> ssl.SSLContext:
    """A client context verifying the server against ``trust_cert_path`` (PEM), else the system CAs."""
    context = ssl.create_default_context(cafile=None if trust_cert_path is None else str(trust_cert_path))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


async def create_server(
    factory: Callable[[], asyncio.Protocol],
    host: str,
    port: int,
    *,
    backlog: int,
    start_serving: bool,
    tls: ServerTls | None,
) -> Any:
    """``loop.create_server`` for plain and enforcing servers, a :class:`SniffingServer` for permissive ones."""
    loop = asyncio.get_running_loop()
    if tls is None:
        return await loop.create_server(
            factory, host, port, reuse_address=True, backlog=backlog, start_serving=start_serving
        )
    if tls.mode == "enforcing":
        return await loop.create_server(
            lambda: HandshakeGate(factory),
            host,
            port,
            reuse_address=True,
            backlog=backlog,
            start_serving=start_serving,
            ssl=tls.context,
        )
    server = SniffingServer(factory, host, port, tls.context, backlog)
    if start_serving:
        await server.start_serving()
    return server


class SniffingServer:
    """A listening socket whose connections go plain or TLS by their first byte (duck-types asyncio.Server)."""

    def __init__(
        self, factory: Callable[[], asyncio.Protocol], host: str, port: int, context: ssl.SSLContext, backlog: int
    ) -> None:
        self._factory = factory
        self._context = context
        info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        listener = socket.socket(info[0], socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(info[4])
            listener.listen(backlog)
            listener.setblocking(False)
        except OSError:
            listener.close()
            raise
        self.sockets = [listener]
        self._accepting: asyncio.Task[None] | None = None
        self._sniffing: set[asyncio.Task[None]] = set()

    async def start_serving(self) -> None:
        if self._accepting is None:
            self._accepting = asyncio.get_running_loop().create_task(self._accept_loop(), name="sparkmq-tls-accept")

    def close(self) -> None:
        for task in [self._accepting, *self._sniffing]:
            if task is not None:
                task.cancel()
        if self.sockets:
            self.sockets[0].close()

    async def wait_closed(self) -> None:
        tasks = [t for t in [self._accepting, *self._sniffing] if t is not None]
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        listener = self.sockets[0]
        while True:
            try:
                connection, _ = await loop.sock_accept(listener)
            except OSError as exc:  # EMFILE and the like: log, breathe, go on (as asyncio's own accept loop)
                logger.warning("accepting a connection failed: %s", exc)
                await asyncio.sleep(0.1)
                continue
            task = loop.create_task(self._sniff(connection))
            self._sniffing.add(task)
            task.add_done_callback(self._sniffing.discard)

    async def _sniff(self, connection: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        handed_over = False
        try:
            connection.setblocking(False)
            first = await _peek_first_byte(loop, connection)
            if not first:
                return  # closed, or silent past the deadline
            tls = first[0] == TLS_HANDSHAKE_RECORD
            if tls:
                await loop.connect_accepted_socket(lambda: HandshakeGate(self._factory), connection, ssl=self._context)
            else:
                await loop.connect_accepted_socket(self._factory, connection)
            handed_over = True
        except (OSError, ssl.SSLError) as exc:
            logger.info("connection dropped before it was served: %s: %s", type(exc).__name__, exc)
        finally:
            if not handed_over:
                connection.close()


class HandshakeGate(asyncio.Protocol):
    """Stands in for the real protocol until the TLS handshake is done, then hands the transport over.

    asyncio builds a TLS connection's protocol at accept time but calls its ``connection_made``
    only after the handshake, and never its ``connection_lost`` when the handshake fails. The
    server's factory registers each connection it builds, so it must only run for connections
    that will also be closed: those whose handshake succeeded.
    """

    def __init__(self, factory: Callable[[], asyncio.Protocol]) -> None:
        self._factory = factory

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        protocol = self._factory()
        transport.set_protocol(protocol)
        protocol.connection_made(transport)


async def _peek_first_byte(loop: asyncio.AbstractEventLoop, connection: socket.socket) -> bytes:
    readable: asyncio.Future[None] = loop.create_future()

    def ready() -> None:
        if not readable.done():
            readable.set_result(None)

    loop.add_reader(connection.fileno(), ready)
    try:
        async with asyncio.timeout(FIRST_BYTE_TIMEOUT_S):  # not wait_for: on 3.11 it can swallow a cancel
            await readable
    except TimeoutError:
        return b""
    finally:
        loop.remove_reader(connection.fileno())
    return connection.recv(1, socket.MSG_PEEK)


__all__ = [
    "SERVER_MODES",
    "HandshakeGate",
    "ServerTls",
    "SniffingServer",
    "client_context",
    "create_server",
    "server_context",
]
