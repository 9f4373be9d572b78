"""``sparkmq proxy``: the gRPC endpoint in front of a NameServer's broker groups (proxyMode=CLUSTER)."""

from __future__ import annotations

import asyncio

from sparkmq.broker.grpc.remote import RemoteBackend
from sparkmq.broker.grpc.servicer import GrpcServer, MessagingServicer
from sparkmq.remoting.periodic import run_every, stop_tasks


class GrpcProxy:
    """One gRPC server whose servicer talks remoting to the brokers (no ACL, no transactions)."""

    def __init__(self, namesrv: str, host: str = "127.0.0.1", port: int = 8081, invisible_ms: int = 60_000) -> None:
        self.backend = RemoteBackend(namesrv, invisible_ms)
        self.servicer = MessagingServicer(self.backend, None, None)
        self.server: GrpcServer | None = None  # made on the serving loop (grpc.aio binds to it)
        self.host = host
        self.port = port
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self) -> None:
        self.server = GrpcServer(self.servicer, self.host, self.port)
        self.port = await self.server.start()
        renew = self.servicer.renew
        loop = run_every(max(0.1, renew.ahead_ms / 3000), renew.renew_due, "proxy grpc-auto-renew")
        self._tasks.append(asyncio.get_running_loop().create_task(loop, name="sparkmq-proxy-renew"))

    async def close(self) -> None:
        await stop_tasks(self._tasks, "proxy")
        if self.server is not None:
            await self.server.close()
        await self.backend.close()
