"""An embedded NameServer + Broker on a background thread: for jobs, notebooks and demos.

For example::

    with EmbeddedCluster(Path("data/store")) as cluster:
        producer = Producer("PID", cluster.namesrv_address)
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from pathlib import Path

from sparkmq.broker.config import BrokerConfig
from sparkmq.broker.controller import BrokerController
from sparkmq.namesrv import NameServer, NamesrvConfig
from sparkmq.store.config import FlushDiskType


class EmbeddedCluster:
    """One NameServer and one broker (store under ``store_dir``) serving on loopback."""

    def __init__(
        self,
        store_dir: Path,
        *,
        host: str = "127.0.0.1",
        namesrv_port: int = 0,
        broker_port: int = 0,
        sync_flush: bool = False,
    ) -> None:
        self._namesrv = NameServer(NamesrvConfig(host, namesrv_port))
        self._broker_config = BrokerConfig(
            broker_ip=host,
            listen_port=broker_port,
            store_path_root_dir=store_dir,
            flush_disk_type=FlushDiskType.SYNC_FLUSH if sync_flush else FlushDiskType.ASYNC_FLUSH,
        )
        self._broker: BrokerController | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="sparkmq-embedded", daemon=True)

    @property
    def namesrv_address(self) -> str:
        return self._namesrv.address

    @property
    def broker_address(self) -> str:
        assert self._broker is not None
        return self._broker.config.address

    def start(self) -> EmbeddedCluster:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(60)
        return self

    async def _start(self) -> None:
        await self._namesrv.start()
        self._broker = BrokerController(dataclasses.replace(self._broker_config, namesrv_addr=self._namesrv.address))
        await self._broker.start()

    def close(self) -> None:
        """Stop the broker (flushing its store) and the NameServer, then the thread."""

        async def stop() -> None:
            if self._broker is not None:
                await self._broker.close()
            await self._namesrv.close()

        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(60)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> EmbeddedCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()
