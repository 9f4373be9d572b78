"""NameServer: the composition root that wires route tables, processors and a remoting server.

It owns three things: a :class:`RouteInfoManager`, a :class:`RemotingServer` with the
:class:`NamesrvProcessors` registered on it, and a periodic scan that evicts brokers silent
for longer than ``broker_expired_s`` (closing their connections, as Java's
``scanNotActiveBroker`` does). A broker whose registering connection closes is evicted at
once, from the server's connection-closed listener. Everything runs on one event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from types import TracebackType
from typing import Self

from sparkmq.controller import ControllerManager
from sparkmq.remoting import RemotingConnection, RemotingServer
from sparkmq.remoting.periodic import run_every

from .config import NamesrvConfig
from .processors import NamesrvProcessors
from .routes import RouteInfoManager, monotonic_ms

logger = logging.getLogger(__name__)


class NameServer:
    """A RocketMQ 4.x NameServer on ``config.host:config.port``.

    Example::

        >>> async def demo() -> int:
        ...     async with NameServer(NamesrvConfig("127.0.0.1", port=0)) as namesrv:
        ...         return namesrv.port > 0
        >>> asyncio.run(demo())
        True
    """

    def __init__(self, config: NamesrvConfig, *, clock: Callable[[], int] = monotonic_ms) -> None:
        self.config = config
        self.routes: RouteInfoManager[RemotingConnection] = RouteInfoManager(
            broker_channel_expired_ms=config.broker_expired_ms, clock=clock
        )
        self._remoting = RemotingServer(config.host, config.port, config.limits, tls=config.tls)
        NamesrvProcessors(self.routes, guard_registrations=config.guard_registrations).register_with(self._remoting)
        self._remoting.on_connection_closed(self._connection_closed)
        # RocketMQ 5's controller on the same port (enableControllerInNamesrv=true)
        self.controller = None if config.controller is None else ControllerManager(config.controller, self._remoting)
        self._scan_task: asyncio.Task[None] | None = None
        self._started = False
        self._closed = False

    @property
    def port(self) -> int:
        """The bound port (the real one when configured with 0); only valid after ``start()``."""
        if not self._started:
            raise RuntimeError("NameServer.port is known only after start()")
        return self._remoting.port

    @property
    def remoting(self) -> RemotingServer:
        """The remoting server (its connections and limits), for operators and tests."""
        return self._remoting

    @property
    def address(self) -> str:
        """``host:port`` as clients and brokers should be given it."""
        return f"{self.config.host}:{self.port}"

    async def start(self) -> None:
        """Listen and start the expiry scan; a NameServer starts once."""
        if self._started:
            raise RuntimeError("NameServer.start() called twice")
        self._started = True
        await self._remoting.start()
        scan = run_every(self.config.scan_interval_s, self.scan_not_active_brokers, "namesrv-broker-scan")
        self._scan_task = asyncio.get_running_loop().create_task(scan, name="namesrv-broker-scan")
        self._scan_task.add_done_callback(_report_scan_failure)
        if self.controller is not None:
            self.controller.address = self.address
            await self.controller.start()
        logger.info(
            "name server listening on %s (brokers expire after %.3g s)", self.address, self.config.broker_expired_s
        )

    async def close(self) -> None:
        """Stop the scan, stop accepting and close every connection; idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._scan_task is not None:
            self._scan_task.cancel()
            # A failure of the scan was already logged by its done callback; a cancellation of
            # close() itself still propagates out of gather().
            await asyncio.gather(self._scan_task, return_exceptions=True)
        if self.controller is not None:
            await self.controller.close()
        await self._remoting.close()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def scan_not_active_brokers(self) -> list[str]:
        """Evict brokers silent for too long and close their connections; the evicted addresses."""
        evicted = self.routes.evict_stale()
        for addr, info in evicted:
            logger.warning(
                "broker %s expired: no registration for more than %d ms", addr, self.routes.broker_channel_expired_ms
            )
            if info.channel is not None:
                info.channel.close()
        return [addr for addr, _info in evicted]

    def _connection_closed(self, connection: RemotingConnection) -> None:
        removed = self.routes.channel_closed(connection)
        if removed:
            logger.info("broker connection from %s:%d closed: removed %s", *connection.peer, ", ".join(removed))


def _report_scan_failure(task: asyncio.Task[None]) -> None:
    # The scan never stops on its own; if a bug ends it, say so loudly rather than stop evicting silently.
    if not task.cancelled() and task.exception() is not None:
        logger.error("broker expiry scan stopped", exc_info=task.exception())


__all__ = ["NameServer"]
