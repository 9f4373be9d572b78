"""ControllerServer: a standalone controller node (``sparkmq controller --port P``)."""

from __future__ import annotations

from types import TracebackType
from typing import Self

from sparkmq.remoting import RemotingServer

from .config import ControllerConfig
from .manager import ControllerManager


class ControllerServer:
    """A :class:`ControllerManager` on its own remoting server at ``host:port``."""

    def __init__(self, config: ControllerConfig, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self._remoting = RemotingServer(host, port)
        self.manager = ControllerManager(config, self._remoting)

    @property
    def address(self) -> str:
        return f"{self.host}:{self._remoting.port}"

    async def start(self) -> None:
        await self._remoting.start()
        self.manager.address = self.address
        await self.manager.start()

    async def close(self) -> None:
        await self.manager.close()
        await self._remoting.close()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
