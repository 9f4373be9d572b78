"""HAService: a broker's replication role, and the one call the send path makes (``confirm``).

The split that lets automatic failover come later without touching replication:

* :class:`ReplicationSource` streams CommitLog bytes from any offset a slave asks for;
* :class:`ReplicationSink` appends what one master streams, from its own end;
* *who is master* is only ``master_ha_address`` (configured, learned from the NameServer's
  register result, or later set by a controller), and the role is which of the two runs
  (``become_master`` / ``become_slave`` switch at run time).

``confirm`` is RocketMQ's ``CommitLog.handleHA``: on a SYNC_MASTER, a put whose producer waits
(``WAIT=true``) is acknowledged only once a slave reported its end offset; when no slave is
connected (or it is ``haSlaveFallbehindMax`` behind) the answer is SLAVE_NOT_AVAILABLE at once,
and after ``syncFlushTimeout`` FLUSH_SLAVE_TIMEOUT. Both mean "stored here, not confirmed".
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable

from sparkmq.broker.config import BrokerConfig
from sparkmq.broker.ha.acks import ALL, SlaveAcks
from sparkmq.broker.ha.master import ReplicationSource
from sparkmq.broker.ha.slave import ReplicationSink
from sparkmq.store import MessageStore, PutMessageStatus, PutResult

logger = logging.getLogger(__name__)
_CONFIRMABLE = (PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT)


class HAService:
    """Runs the master side (always, so slaves can attach) and, on a slave, the link to its master."""

    def __init__(self, config: BrokerConfig, store: MessageStore) -> None:
        self.config = config
        self.store = store
        self.acks = SlaveAcks()
        if config.enable_controller_mode:
            self.acks.any_slave = False
            self.acks.need = ALL if config.all_ack_in_sync_state_set else config.in_sync_replicas
        self.master_ha_address = config.ha_master_address
        self.source: ReplicationSource | None = None
        self.sink: ReplicationSink | None = None

    @property
    def sync_master(self) -> bool:
        return self.config.broker_role == "SYNC_MASTER"

    async def start(self) -> int:
        """Bind the HA port (``haListenPort``; -1 = listenPort + 1), start the role; return the port.

        With no ``haListenPort`` configured and listenPort + 1 taken, any free port is used: the
        register requests name it (``haServerAddr``), so slaves that learn it there still find it.
        """
        cfg = self.config
        try:
            port = await self._bind(cfg.listen_port + 1 if cfg.ha_listen_port < 0 else cfg.ha_listen_port)
        except OSError as exc:
            if cfg.ha_listen_port >= 0:
                raise
            logger.warning(
                "broker %s: HA port %d is taken (%s); using a free port", cfg.broker_name, cfg.listen_port + 1, exc
            )
            port = await self._bind(0)
        assert self.source is not None  # _bind set it, for good
        self.store.add_group_dispatch_listener(self.source.on_put)
        if cfg.enable_controller_mode:
            self.store.slave_mode = True  # until the controller names this broker master
        elif cfg.is_slave:
            self.become_slave()
        return port

    async def _bind(self, port: int) -> int:
        cfg, store = self.config, self.store
        self.source = ReplicationSource(
            cfg.listen_host or cfg.broker_ip,
            port,
            store.read_commitlog,
            lambda: store.commitlog.max_offset,
            store.config.commitlog_file_bytes,
            cfg.ha_transfer_batch_size,
            cfg.ha_send_heartbeat_interval / 1000,
            self.acks,
        )
        return await self.source.start()

    def become_slave(
        self, broker_id: int | None = None, prepare_link: Callable[[], Awaitable[str]] | None = None
    ) -> None:
        """Refuse puts and follow ``master_ha_address`` (reconnecting every ``haSendHeartbeatInterval``).

        Controller mode: ``prepare_link`` is awaited before each link (it truncates a divergent tail
        and returns the master's HA address) and the link opens with ``broker_id``.
        """
        self.store.slave_mode = True
        if self.sink is None:
            interval_s = self.config.ha_send_heartbeat_interval / 1000
            self.sink = ReplicationSink(
                prepare_link or self._configured_master,
                lambda: self.store.commitlog.max_offset,
                self.store.append_replica,
                self.store.dispatch_replica,
                interval_s,
                interval_s,
                broker_id,
            )
            self.sink.start()

    async def _configured_master(self) -> str:
        return self.master_ha_address

    async def become_master(self) -> None:
        """Stop following and accept puts (queue offsets continue from the replicated ones).

        The hook a failover controller calls on the slave it promotes; the broker's master-only
        services (delayed delivery, transaction checks) are the controller's to start.
        """
        await self.stop_following()
        self.store.slave_mode = False

    async def stop_following(self) -> None:
        """End the link to the master (a new one starts with the next ``become_slave``)."""
        if self.sink is not None:
            await self.sink.close()
            self.sink = None

    def learn_master(self, ha_server_addr: str | None) -> None:
        """A register result named the master's HA address (used unless ``haMasterAddress`` is set)."""
        if ha_server_addr and not self.config.ha_master_address and ha_server_addr != self.master_ha_address:
            logger.info("broker %s: master HA address is now %s", self.config.broker_name, ha_server_addr)
            self.master_ha_address = ha_server_addr

    def in_sync_refusal(self) -> PutResult | None:
        """A controller-mode SYNC_MASTER whose SyncStateSet is smaller than ``minInSyncReplicas``
        refuses puts before storing them (``IN_SYNC_REPLICAS_NOT_ENOUGH``)."""
        cfg = self.config
        if not cfg.enable_controller_mode or not self.sync_master or self.store.slave_mode:
            return None  # a replica refuses puts anyway (slave mode)
        members = len(self.acks.sync_state_set) + 1  # the master and the other members
        if members >= cfg.min_in_sync_replicas:
            return None
        remark = (
            f"in-sync replicas not enough: the SyncStateSet holds {members}, "
            f"minInSyncReplicas is {cfg.min_in_sync_replicas}"
        )
        return PutResult(PutMessageStatus.IN_SYNC_REPLICAS_NOT_ENOUGH, remark)

    async def confirm(self, results: list[PutResult], waits: list[bool]) -> list[PutResult]:
        """The puts' outcomes once replication is as confirmed as the role promises (``handleHA``).

        A group put's results are confirmed together: one check of the slave's lag and one wait
        for the highest end among those that wait, not one waiter per request.
        """
        if not self.sync_master and not self.config.enable_controller_mode:
            return results
        waiting = [
            i
            for i, (result, wait) in enumerate(zip(results, waits, strict=True))
            if wait and result.status in _CONFIRMABLE and len(result.sizes)
        ]
        if not waiting:
            return results
        end = max(int(results[i].physical_offsets[-1]) + int(results[i].sizes[-1]) for i in waiting)
        failed = await self._replicated(end)
        if failed is None:
            return results
        confirmed = list(results)
        for i in waiting:
            confirmed[i] = dataclasses.replace(results[i], status=failed[0], remark=failed[1])
        return confirmed

    async def confirm_run(self, result: PutResult, end: int) -> PutResult:
        """``confirm`` for sends stored as one CommitLog run ending at ``end`` that share ``result``
        (the native send lane's group)."""
        if not self.sync_master or result.status not in _CONFIRMABLE:
            return result
        failed = await self._replicated(end)
        return result if failed is None else dataclasses.replace(result, status=failed[0], remark=failed[1])

    async def _replicated(self, end: int) -> tuple[PutMessageStatus, str] | None:
        """None once replicas confirmed the CommitLog up to ``end``; else what each waiting send answers."""
        if not self.acks.slave_ok(end, self.config.ha_slave_fallbehind_max):
            return PutMessageStatus.SLAVE_NOT_AVAILABLE, "no slave is connected or it is too far behind"
        if self.source is not None:
            self.source.wake()
        if await self.acks.wait(end, self.config.sync_flush_timeout / 1000):
            self.acks.confirmed = max(self.acks.confirmed, end)
            return None
        return PutMessageStatus.FLUSH_SLAVE_TIMEOUT, "no slave confirmed the message within syncFlushTimeout"

    async def close(self) -> None:
        if self.sink is not None:
            await self.sink.close()
        if self.source is not None:
            await self.source.close()
