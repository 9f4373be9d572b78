"""BrokerController: the composition root of a broker (store, tables, processors, services).

For example::

    async with BrokerController(BrokerConfig(namesrv_addr="127.0.0.1:9876", listen_port=0)) as broker:
        print(broker.config.address)
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from sparkmq import native
from sparkmq.broker.acl import AclValidator
from sparkmq.broker.clients import ClientManager
from sparkmq.broker.config import BrokerConfig
from sparkmq.broker.context import BrokerContext
from sparkmq.broker.ha import HAService, SlaveSynchronize, TableSyncProcessors
from sparkmq.broker.ha.replicas import ReplicasManager
from sparkmq.broker.locks import RebalanceLockManager
from sparkmq.broker.long_polling import PullHoldService
from sparkmq.broker.metrics import PromExporter
from sparkmq.broker.persistence import TablePersister
from sparkmq.broker.pop import PopService
from sparkmq.broker.pop.journal import PopJournal
from sparkmq.broker.pop.revive_log import ReviveLog
from sparkmq.broker.processors.admin import AdminProcessors
from sparkmq.broker.processors.admin_ops import AdminOpsProcessors
from sparkmq.broker.processors.consumer import ConsumerProcessors
from sparkmq.broker.processors.pop import PopProcessors
from sparkmq.broker.processors.pull import PullProcessor
from sparkmq.broker.processors.pull_lane import pull_lane
from sparkmq.broker.processors.send import SendProcessor
from sparkmq.broker.processors.send_back import SendBackProcessor
from sparkmq.broker.processors.send_lane import send_lane
from sparkmq.broker.registration import NamesrvRegistration
from sparkmq.broker.schedule import ScheduleMessageService
from sparkmq.broker.stats import SAMPLE_INTERVAL_S, timed
from sparkmq.broker.subscriptions import SubscriptionGroupManager
from sparkmq.broker.table_topics import TableStatusProcessor, start_materializer
from sparkmq.broker.topics import TopicConfigManager
from sparkmq.broker.transactions import TransactionService
from sparkmq.errors import ConfigError
from sparkmq.offsets import OffsetFile
from sparkmq.protocol import RequestCode
from sparkmq.remoting import RemotingClient, RemotingConnection, RemotingServer
from sparkmq.remoting.lanes import Lanes
from sparkmq.remoting.periodic import run_every, stop_tasks
from sparkmq.remoting.server import Processor
from sparkmq.store import MessageStore
from sparkmq.store.config import FlushDiskType

if TYPE_CHECKING:
    from sparkmq.broker.grpc.servicer import GrpcServer

logger = logging.getLogger(__name__)
CLIENT_SCAN_INTERVAL_S = 10.0
SCHEDULE_INTERVAL_S = 0.1  # DELAY_FOR_A_WHILE
IN_FLIGHT_GRACE_S = 2.0
VIP_PORT_BELOW = 2  # the VIP channel (fastListenPort) listens on listenPort - 2, where 4.x clients send most requests
PERSIST_TICK_S = 1.0  # changed topics, groups and delay progress reach disk within this
POP_REVIVE_INTERVAL_S = 0.5  # an expired POP message is revived within this of its deadline


class BrokerController:
    """Builds and runs one broker; ``start()`` recovers the store, then serves."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.server = RemotingServer(
            config.listen_host or config.broker_ip, config.listen_port, config.server_limits(), tls=config.server_tls()
        )
        self.namesrv_client = RemotingClient()
        self.store: MessageStore | None = None
        self.context: BrokerContext | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.transactions: TransactionService | None = None
        self._registration: NamesrvRegistration | None = None
        self._offset_file: OffsetFile | None = None
        self._schedule: ScheduleMessageService | None = None
        self.ha: HAService | None = None
        self.slave_sync: SlaveSynchronize | None = None
        self.replicas: ReplicasManager | None = None  # controller mode (enableControllerMode)
        self.persister = TablePersister(f"broker {config.broker_name}")
        self.metrics: PromExporter | None = None
        self.pop: PopService | None = None
        self.grpc: GrpcServer | None = None
        # A malformed accounts file refuses the start here, before anything binds.
        self.acl = AclValidator(config.acl_path()) if config.acl_enable else None
        self.server.authorize = None if self.acl is None else self.acl.authorize
        if config.enable_grpc_server:  # a missing grpc extra refuses the start here, before anything binds
            _grpc_server_class()

    async def start(self) -> None:
        port = await self.server.start(serve=False, companion_below=VIP_PORT_BELOW)
        free_ports = self.config.listen_port == 0 and self.config.ha_listen_port < 0  # the HA port is free too
        self.config = cfg = dataclasses.replace(
            self.config, listen_port=port, ha_listen_port=0 if free_ports else self.config.ha_listen_port
        )
        config_dir = cfg.store_path_root_dir / "config"
        self.store = store = MessageStore(cfg.store_config())
        await asyncio.to_thread(store.start)
        self.ha = HAService(cfg, store)
        self.config = cfg = dataclasses.replace(cfg, ha_listen_port=await self.ha.start())
        self._offset_file = OffsetFile(config_dir / "consumerOffset.json")
        topics = TopicConfigManager(
            config_dir / "topics.json",
            cluster_name=cfg.broker_cluster_name,
            broker_name=cfg.broker_name,
            auto_create=cfg.auto_create_topic_enable,
            default_queue_nums=cfg.default_topic_queue_nums,
            max_queue_nums=cfg.max_topic_queue_nums,
            trace_topic=cfg.msg_trace_topic_name if cfg.trace_topic_enable else None,
        )
        topics.load()
        await asyncio.to_thread(topics.persist)
        groups = SubscriptionGroupManager(
            config_dir / "subscriptionGroup.json", cfg.auto_create_subscription_group, cfg.max_subscription_group_nums
        )
        groups.load()
        holds = PullHoldService(asyncio.get_running_loop(), store.max_offset_in_queue)
        store.add_group_dispatch_listener(holds.notify_group)
        offsets = self._offset_file.load()
        self.context = ctx = BrokerContext(
            cfg,
            store,
            offsets,
            topics,
            groups,
            ClientManager(cfg.client_channel_expired_ms / 1000),
            holds,
            RebalanceLockManager(),
            self.persister,
            ha=self.ha,
        )
        ctx.tables = await asyncio.to_thread(start_materializer, ctx)
        self.server.register(RequestCode.SPARKMQ_TABLE_STATUS, TableStatusProcessor(topics, ctx.tables))
        self._register_processors(ctx)
        self.transactions = TransactionService(ctx)
        self.server.register(RequestCode.END_TRANSACTION, self.transactions.end_transaction)
        if not cfg.is_slave and not cfg.enable_controller_mode:
            # a slave neither checks transactions nor delivers delayed messages (startProcessorByHa)
            await self.transactions.start()
        self.server.on_connection_closed(self._connection_closed)
        self._schedule = schedule = ScheduleMessageService(
            store, config_dir / "delayOffset.json", len(cfg.message_delay_level.split())
        )
        schedule.load()
        offsets_interval_s = cfg.flush_consumer_offset_interval / 1000
        self.persister.add(
            "consumerOffset.json",
            lambda: offsets.version,
            lambda: offsets,
            self._offset_file.persist,
            offsets_interval_s,
        )
        self.persister.add("topics.json", lambda: topics.version, topics.wrapper, topics.write)
        self.persister.add("subscriptionGroup.json", lambda: groups.version, groups.snapshot, groups.write)
        self.persister.add("delayOffset.json", lambda: schedule.version, schedule.snapshot, schedule.write)
        self._registration = NamesrvRegistration(cfg, topics, self.namesrv_client)
        topics.on_change = self._registration.request_now
        self._start_table_sync(ctx, schedule)
        self._every(min(PERSIST_TICK_S, offsets_interval_s), self.persister.persist_changed, "persist-tables")
        self._every(CLIENT_SCAN_INTERVAL_S, self._expire_clients, "expire-clients")
        if not cfg.is_slave or cfg.enable_controller_mode:
            self._every(SCHEDULE_INTERVAL_S, self._deliver_delayed, "deliver-delayed")
        self._every(SAMPLE_INTERVAL_S, ctx.stats.sample, "stats-sample")
        if cfg.metrics_exporter_type == "PROM":
            self.metrics = PromExporter(
                ctx, cfg.metrics_prom_exporter_host or cfg.broker_ip, cfg.metrics_prom_exporter_port
            )
            await self.metrics.start()
        if self.acl is not None:
            self._every(cfg.acl_reload_interval_ms / 1000, self.acl.reload_if_changed, "acl-reload")
        await self._start_pop(ctx)
        if cfg.enable_controller_mode:
            self.replicas = ReplicasManager(cfg, self.ha, self.namesrv_client, self._apply_role)
            self.server.register(RequestCode.NOTIFY_BROKER_ROLE_CHANGED, self.replicas.role_changed)
            self.server.register(RequestCode.GET_BROKER_EPOCH_CACHE, self.replicas.epoch_cache)
            self._registration.paused = True  # until the controller gives this broker its role
        await self.server.start_serving()
        await self._registration.start()
        if self.replicas is not None:
            await self.replicas.start()
        logger.info("broker %s listening on %s (store %s)", cfg.broker_name, cfg.address, cfg.store_path_root_dir)

    async def _start_pop(self, ctx: BrokerContext) -> None:
        """The POP core (RocketMQ 5 consumers) and, with ``enableGrpcServer``, the gRPC endpoint over it."""
        cfg = self.config
        sync = cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH
        log = ReviveLog(ctx) if cfg.enable_controller_mode else None  # replicas take over only in controller mode
        # with the revive log its records (flushed like sends) make the journal's lines durable: PopService
        journal = PopJournal(cfg.store_path_root_dir / "pop" / "journal", sync)
        self.pop = pop = PopService(ctx, journal, log=log)
        pop.start()
        served = PopProcessors(ctx, pop)
        for code, processor in (
            (RequestCode.POP_MESSAGE, served.pop_message),
            (RequestCode.ACK_MESSAGE, served.ack_message),
            (RequestCode.CHANGE_MESSAGE_INVISIBLETIME, served.change_invisible_time),
        ):
            self.server.register(code, timed(processor, code, ctx.stats))
        self._every(POP_REVIVE_INTERVAL_S, pop.tick, "pop-revive")  # a master revives, a replica follows
        if cfg.enable_grpc_server:
            assert self.transactions is not None
            self.grpc = _grpc_server_class().local(ctx, pop, self.transactions.end_transaction, self.acl)
            renew = self.grpc.servicer.renew
            self._every(max(0.1, renew.ahead_ms / 3000), renew.renew_due, "grpc-auto-renew")
            port = await self.grpc.start()
            self.config = ctx.config = dataclasses.replace(cfg, grpc_server_port=port)
            logger.info("broker %s gRPC endpoint listening on %s:%d", cfg.broker_name, cfg.broker_ip, port)

    def _register_processors(self, ctx: BrokerContext) -> None:
        send, pull, send_back = SendProcessor(ctx), PullProcessor(ctx), SendBackProcessor(ctx)
        consumer, admin = ConsumerProcessors(ctx), AdminProcessors(ctx)
        table: dict[RequestCode, Processor] = {
            RequestCode.SEND_MESSAGE: send,
            RequestCode.SEND_MESSAGE_V2: send,
            RequestCode.SEND_BATCH_MESSAGE: send,
            RequestCode.PULL_MESSAGE: pull,
            RequestCode.CONSUMER_SEND_MSG_BACK: send_back,
            RequestCode.HEART_BEAT: consumer.heartbeat,
            RequestCode.UNREGISTER_CLIENT: consumer.unregister_client,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: consumer.consumer_list,
            RequestCode.QUERY_CONSUMER_OFFSET: consumer.query_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: consumer.update_offset,
            RequestCode.LOCK_BATCH_MQ: consumer.lock_batch,
            RequestCode.UNLOCK_BATCH_MQ: consumer.unlock_batch,
            RequestCode.CHECK_CLIENT_CONFIG: consumer.check_client_config,
            RequestCode.GET_MAX_OFFSET: admin.max_offset,
            RequestCode.GET_MIN_OFFSET: admin.min_offset,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: admin.search_offset,
            RequestCode.GET_EARLIEST_MSG_STORETIME: admin.earliest_time,
            RequestCode.VIEW_MESSAGE_BY_ID: admin.view_message,
            RequestCode.QUERY_MESSAGE: admin.query_message,
            RequestCode.UPDATE_AND_CREATE_TOPIC: admin.create_topic,
            RequestCode.DELETE_TOPIC_IN_BROKER: admin.delete_topic,
            RequestCode.GET_ALL_TOPIC_CONFIG: admin.all_topic_config,
            RequestCode.GET_TOPIC_STATS_INFO: admin.topic_stats,
            RequestCode.GET_CONSUME_STATS: admin.consume_stats,
            RequestCode.GET_BROKER_RUNTIME_INFO: admin.runtime_info,
        }
        table.update(AdminOpsProcessors(ctx).table())
        for code, processor in table.items():
            self.server.register(code, timed(processor, code, ctx.stats))
        # plain sends (single and batch) and pulls served from the read's bytes, natively (docs/native.md)
        sends = send_lane(ctx, native.sendlane)
        lanes = [lane for lane in (sends, pull_lane(pull, native.sendlane)) if lane]
        self.server.lane = Lanes(*lanes) if lanes else None
        self.server.turn_lane = sends  # the sends of many connections' reads in one turn: one put
        self.server.lane_codes = frozenset(
            {
                int(RequestCode.SEND_MESSAGE),
                int(RequestCode.SEND_MESSAGE_V2),
                int(RequestCode.SEND_BATCH_MESSAGE),
                int(RequestCode.PULL_MESSAGE),
            }
        )

    def _start_table_sync(self, ctx: BrokerContext, schedule: ScheduleMessageService) -> None:
        """Masters serve their tables to slaves; a slave copies them every ``slaveSynchronizeInterval``."""
        tables = TableSyncProcessors(ctx, schedule)
        for code, processor in tables.table().items():
            self.server.register(code, processor)
        if not self.config.is_slave and not self.config.enable_controller_mode:
            return
        assert self.ha is not None and self._registration is not None
        self.slave_sync = sync = SlaveSynchronize(ctx, schedule, self.namesrv_client)
        self._every(self.config.slave_synchronize_interval / 1000, sync.sync_all, "slave-synchronize")
        if self.config.enable_controller_mode:
            return  # the controller names the master, not the NameServers
        ha = self.ha

        def learn(ha_server_addr: str | None, master_addr: str | None) -> None:
            ha.learn_master(ha_server_addr)
            sync.learn_master(master_addr)

        self._registration.on_result = learn

    def _every(self, interval_s: float, action: Callable[[], object], name: str) -> None:
        loop = run_every(interval_s, action, f"broker {self.config.broker_name} {name}")
        self._tasks.append(asyncio.get_running_loop().create_task(loop, name=f"sparkmq-{name}"))

    def _connection_closed(self, connection: RemotingConnection) -> None:
        if self.context is not None:
            self.context.notify_consumer_ids_changed(self.context.clients.connection_closed(connection))

    def _expire_clients(self) -> None:
        assert self.context is not None
        self.context.notify_consumer_ids_changed(self.context.clients.expire_silent())

    async def _apply_role(self, master: bool, broker_id: int, master_addr: str) -> None:
        """The controller made this broker master (registered as brokerId 0) or a replica of ``master_addr``."""
        assert self.context is not None and self.ha is not None and self._registration is not None
        assert self.transactions is not None
        cfg = dataclasses.replace(self.config, broker_role="SYNC_MASTER" if master else "SLAVE", broker_id=broker_id)
        self.config = self.context.config = self.ha.config = self._registration.config = cfg
        if self.slave_sync is not None:
            self.slave_sync.master_addr = "" if master else master_addr
        if master:  # the check-back and POP revive run on the master only (startProcessorByHa / shutdownProcessorByHa)
            adopted = self.context.topics.adopt_stored(self.context.store.queue_ids())
            if adopted:
                logger.warning("promoted: topics the last sync had not brought, taken from the store: %s", adopted)
            if self.pop is not None:
                self.pop.promote()
            await self.transactions.start()
        else:
            if self.pop is not None:
                self.pop.demote()
            await self.transactions.stop()
        self._registration.paused = False
        await self._registration.register_all()

    def _deliver_delayed(self) -> None:
        assert self._schedule is not None
        if self.config.is_slave:
            return
        self._schedule.deliver_due()

    async def close(self) -> None:
        """Stop accepting, answer parked pulls, unregister, persist tables, flush and close the store.

        Every step runs even when an earlier one failed (each failure is logged with its
        traceback), so one unwritable table never leaves the others unsaved or the abort marker behind.
        """
        self.server.stop_accepting()
        if self.transactions is not None:  # its scan thread must be done before the store closes
            await self.transactions.close()
        if self.replicas is not None:
            await self._close_step("stop the controller tasks", self.replicas.close)
        if self._registration is not None:
            await self._close_step("unregister from NameServers", self._registration.close)
        if self.context is not None:
            self.context.holds.wake_all()
            await self._close_step("drain in-flight requests", self._drain_in_flight)
        await self._close_step("close connections", self.server.close)
        if self.grpc is not None:
            await self._close_step("stop the gRPC endpoint", self.grpc.close)
        if self.metrics is not None:
            await self._close_step("close the metrics endpoint", self.metrics.close)
        await stop_tasks(self._tasks, f"broker {self.config.broker_name}")
        self._tasks.clear()
        if self.ha is not None:
            await self._close_step("stop replication", self.ha.close)
        failed = await self.persister.persist_changed(ignore_intervals=True)
        tables = self.context.tables if self.context is not None else None
        if tables is not None:
            await self._close_step("stop the table writer", lambda: asyncio.to_thread(tables.close))
        if self.pop is not None:
            self.pop.close()
        store = self.store
        if store is not None:
            await self._close_step("close the store", lambda: asyncio.to_thread(store.close))
        await self._close_step("close NameServer connections", self.namesrv_client.close)
        if failed:
            logger.error(
                "broker %s stopped, but %s could not be persisted (see above)",
                self.config.broker_name,
                ", ".join(failed),
            )
        else:
            logger.info("broker %s stopped", self.config.broker_name)

    async def _close_step(self, what: str, step: Callable[[], Awaitable[object]]) -> None:
        try:
            await step()
        except Exception:  # closing goes on: the rest must still be persisted and the store closed
            logger.exception("broker %s: %s failed during close", self.config.broker_name, what)

    async def _drain_in_flight(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + IN_FLIGHT_GRACE_S
        while loop.time() < deadline and any(c.in_flight for c in self.server.connections):
            await asyncio.sleep(0.01)

    async def __aenter__(self) -> BrokerController:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


def _grpc_server_class() -> type[GrpcServer]:
    """The gRPC endpoint's server, imported only when ``enableGrpcServer`` asks for it (the grpc extra)."""
    try:
        from sparkmq.broker.grpc.servicer import GrpcServer
    except ImportError as exc:
        raise ConfigError(f"enableGrpcServer=true needs the grpc extra (pip install 'sparkmq[grpc]'): {exc}") from exc
    return GrpcServer
