"""NameServer registration: REGISTER_BROKER every ``registerNameServerPeriod`` and on topic changes.

The broker keeps one connection per NameServer; a NameServer evicts a broker whose
connection closes, so staying connected is part of being alive. UNREGISTER_BROKER at
shutdown removes the routes at once.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import Callable

from sparkmq.broker.config import BrokerConfig
from sparkmq.broker.topics import TopicConfigManager
from sparkmq.errors import SparkmqError
from sparkmq.protocol import RequestCode, ResponseCode
from sparkmq.protocol.admin_headers import RegisterBrokerRequestHeader, UnRegisterBrokerRequestHeader
from sparkmq.protocol.namesrv_bodies import RegisterBrokerBody
from sparkmq.remoting import RemotingClient
from sparkmq.remoting.periodic import run_every, run_once, stop_tasks

logger = logging.getLogger(__name__)
REGISTER_TIMEOUT_S = 6.0


class NamesrvRegistration:
    """Registers one broker with every configured NameServer."""

    def __init__(self, config: BrokerConfig, topics: TopicConfigManager, client: RemotingClient) -> None:
        self.config = config
        self.topics = topics
        self.client = client
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self.paused = False  # controller mode: no registration before the controller gave the role
        # A slave learns its master from the result: (haServerAddr, masterAddr), either may be None.
        self.on_result: Callable[[str | None, str | None], None] | None = None

    async def start(self) -> None:
        """Register once now (so routes exist when the broker says it is ready), then periodically."""
        name = f"broker {self.config.broker_name} registration"
        await run_once(self.register_all, name)
        period = self.config.register_name_server_period / 1000
        self._task = asyncio.get_running_loop().create_task(
            run_every(period, self.register_all, name, wake=self._wake), name="sparkmq-register-broker"
        )

    def request_now(self) -> None:
        """Register again soon (a topic changed)."""
        self._wake.set()

    def _header(self, body: bytes) -> dict[str, str]:
        cfg = self.config
        return RegisterBrokerRequestHeader(
            cfg.broker_name,
            cfg.address,
            cfg.broker_cluster_name,
            cfg.ha_address,
            cfg.broker_id,
            False,
            zlib.crc32(body) & 0x7FFFFFFF,
        ).to_fields()

    async def register_all(self) -> int:
        """Register with each NameServer; return how many accepted (failures are logged, retried next period)."""
        if self.paused:
            return 0
        body = RegisterBrokerBody(self.topics.wrapper()).encode()
        accepted = 0
        for address in self.config.namesrv_addresses():
            try:
                response = await self.client.invoke(
                    address, RequestCode.REGISTER_BROKER, self._header(body), body, timeout=REGISTER_TIMEOUT_S
                )
            except SparkmqError as exc:
                logger.warning("register broker with NameServer %s failed: %s", address, exc.remark)
                continue
            if response.code == ResponseCode.SUCCESS:
                accepted += 1
                if self.on_result is not None:
                    fields = response.ext_fields or {}
                    self.on_result(fields.get("haServerAddr"), fields.get("masterAddr"))
            else:
                logger.warning("NameServer %s refused registration: %d %s", address, response.code, response.remark)
        return accepted

    async def close(self) -> None:
        """Stop re-registering and unregister from every NameServer."""
        if self._task is not None:
            await stop_tasks([self._task], f"broker {self.config.broker_name}")
        cfg = self.config
        header = UnRegisterBrokerRequestHeader(
            cfg.broker_name, cfg.address, cfg.broker_cluster_name, cfg.broker_id
        ).to_fields()
        for address in cfg.namesrv_addresses():
            try:
                await self.client.invoke(address, RequestCode.UNREGISTER_BROKER, header, timeout=2.0)
            except SparkmqError as exc:
                logger.warning("unregister from NameServer %s failed: %s", address, exc.remark)
