"""``sparkmq proxy``: the gRPC endpoint in front of a NameServer's broker groups (proxyMode=CLUSTER)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sparkmq.broker.acl import RELOAD_INTERVAL_S, AclValidator
from sparkmq.broker.grpc.remote import RemoteBackend
from sparkmq.broker.grpc.remote_tx import HEARTBEAT_S
from sparkmq.broker.grpc.servicer import GrpcServer, MessagingServicer
from sparkmq.protocol.acl_signing import SessionCredentials
from sparkmq.remoting.periodic import run_every, stop_tasks


class GrpcProxy:
    """One gRPC server whose servicer talks remoting to the brokers.

    ``acl_file`` (a plain_acl accounts file, as a broker's ``aclFile``) turns on the check of every RPC's
    signature and permissions; ``credentials`` sign what the proxy sends the brokers (``aclEnable`` brokers).
    """

    def __init__(
        self,
        namesrv: str,
        host: str = "127.0.0.1",
        port: int = 8081,
        invisible_ms: int = 60_000,
        *,
        acl_file: Path | None = None,
        credentials: SessionCredentials | None = None,
    ) -> None:
        self.backend = RemoteBackend(namesrv, invisible_ms, credentials)
        self.acl = AclValidator(acl_file) if acl_file is not None else None
        self.servicer = MessagingServicer(self.backend, self.acl)
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
        loops = [
            (run_every(max(0.1, renew.ahead_ms / 3000), renew.renew_due, "proxy grpc-auto-renew"), "renew"),
            (run_every(HEARTBEAT_S, self.backend.transactions.heartbeat, "proxy tx-heartbeat"), "tx-heartbeat"),
        ]
        if self.acl is not None:
            loops.append((run_every(RELOAD_INTERVAL_S, self.acl.reload_if_changed, "proxy acl-reload"), "acl-reload"))
        loop = asyncio.get_running_loop()
        self._tasks += [loop.create_task(coro, name=f"sparkmq-proxy-{name}") for coro, name in loops]

    async def close(self) -> None:
        await stop_tasks(self._tasks, "proxy")
        if self.server is not None:
            await self.server.close()
        await self.backend.close()
