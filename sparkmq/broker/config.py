"""BrokerConfig: RocketMQ's broker.conf keys, parsed once at the edge into a frozen dataclass.

``broker.conf`` is a Java properties file, read as ``java.util.Properties`` reads it
(:func:`parse_properties`). :data:`BROKER_CONF_KEYS` is the one table of keys sparkmq knows. Keys
it does not know are logged (RocketMQ ignores them silently; a typo would go unseen), as are known
keys sparkmq does not act on; a known key with a bad value raises :class:`ConfigError` naming it.
"""

from __future__ import annotations

import dataclasses
import logging
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from jproperties import Properties, PropertyError

from sparkmq.errors import ConfigError
from sparkmq.message.layout import DEFAULT_MAX_MESSAGE_BYTES
from sparkmq.message.msgid import ipv4_bytes
from sparkmq.message.names import TRACE_TOPIC
from sparkmq.message.record import Host
from sparkmq.protocol import MAX_FRAME_BYTES
from sparkmq.remoting.limits import FRAME_DEADLINE_S, IDLE_TIMEOUT_S, MAX_BUFFERED_FRAME_BYTES, ServerLimits
from sparkmq.remoting.tls import ServerTls, server_context
from sparkmq.store.config import (
    COMMITLOG_FILE_BYTES,
    DEFAULT_MAX_TRANSFER_BYTES,
    DEFAULT_MESSAGE_DELAY_LEVEL,
    FlushDiskType,
    StoreConfig,
)

logger = logging.getLogger(__name__)
# Room a frame needs besides one stored record: the command's JSON header, where a send carries
# the properties (≤ 32767 bytes, JSON-escaped at up to 6 bytes each) and a pull answer its offsets.
FRAME_HEADER_RESERVE_BYTES = 256 * 1024
MAX_MESSAGE_SIZE_LIMIT = MAX_FRAME_BYTES - FRAME_HEADER_RESERVE_BYTES
TLS_SERVER_MODES = ("permissive", "enforcing", "disabled")  # TlsMode in RocketMQ
BROKER_ROLES = ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE")  # BrokerRole


@dataclass(frozen=True)
class BrokerConfig:
    """A broker's settings; field comments name the broker.conf key.

    >>> BrokerConfig.from_properties({"brokerName": "b1", "listenPort": "0"}).broker_name
    'b1'
    """

    broker_cluster_name: str = "DefaultCluster"  # brokerClusterName
    broker_name: str = "broker-a"  # brokerName
    broker_id: int = 0  # brokerId
    broker_ip: str = "127.0.0.1"  # brokerIP1
    namesrv_addr: str = ""  # namesrvAddr, "host:port;host:port"
    listen_host: str = ""  # the interface to bind, "" = brokerIP1 (not a RocketMQ key)
    listen_port: int = 10911  # listenPort
    store_path_root_dir: Path = Path("store")  # storePathRootDir
    store_path_commit_log: Path | None = None  # storePathCommitLog
    mapped_file_size_commit_log: int = COMMITLOG_FILE_BYTES  # mapedFileSizeCommitLog
    mapped_file_size_consume_queue: int = 300_000 * 20  # mapedFileSizeConsumeQueue
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH  # flushDiskType
    transient_store_pool_enable: bool = False  # transientStorePoolEnable (ASYNC_FLUSH masters only)
    transient_store_pool_size: int = 5  # transientStorePoolSize
    commit_interval_commit_log: int = 200  # commitIntervalCommitLog (ms)
    broker_role: str = "ASYNC_MASTER"  # brokerRole: ASYNC_MASTER | SYNC_MASTER | SLAVE
    ha_listen_port: int = -1  # haListenPort: -1 = listenPort + 1 (Java's default); 0 = any free port
    ha_master_address: str = ""  # haMasterAddress "ip:port" of the master's HA port; "" = learned from NameServers
    ha_send_heartbeat_interval: int = 5000  # haSendHeartbeatInterval (ms): a slave reports its offset this often
    ha_transfer_batch_size: int = 32 * 1024  # haTransferBatchSize: bytes of CommitLog per HA transfer
    ha_slave_fallbehind_max: int = 256 * 1024 * 1024  # haSlaveFallbehindMax: a SYNC send waits only within this
    slave_read_enable: bool = False  # slaveReadEnable: pulls may be redirected to (and served by) slaves
    access_message_in_memory_max_ratio: int = 40  # accessMessageInMemoryMaxRatio (percent of RAM)
    slave_synchronize_interval: int = 10_000  # slaveSynchronizeInterval (ms; sparkmq key, Java fixes 10 s)
    delete_when: str = "04"  # deleteWhen
    file_reserved_time: float = 72  # fileReservedTime (hours)
    disk_max_used_space_ratio: int = 75  # diskMaxUsedSpaceRatio (percent): delete expired files at once above it
    disk_space_clean_forcibly_ratio: int = 85  # diskSpaceCleanForciblyRatio (percent): unexpired ones too
    disk_space_warning_level_ratio: int = 90  # diskSpaceWarningLevelRatio (percent): refuse writes above it
    clean_file_forcibly_enable: bool = True  # cleanFileForciblyEnable
    clean_resource_interval: int = 10_000  # cleanResourceInterval (ms): retention and the disk-space check
    max_hash_slot_num: int = 5_000_000  # maxHashSlotNum (per IndexFile)
    max_index_num: int = 20_000_000  # maxIndexNum (per IndexFile)
    auto_create_topic_enable: bool = True  # autoCreateTopicEnable
    auto_create_subscription_group: bool = True  # autoCreateSubscriptionGroup
    default_topic_queue_nums: int = 8  # defaultTopicQueueNums
    max_message_size: int = DEFAULT_MAX_MESSAGE_BYTES  # maxMessageSize
    long_polling_enable: bool = True  # longPollingEnable
    short_polling_time_mills: int = 1000  # shortPollingTimeMills
    register_name_server_period: int = 30_000  # registerNameServerPeriod (ms)
    flush_consumer_offset_interval: int = 5000  # flushConsumerOffsetInterval (ms)
    sync_flush_timeout: int = 5000  # syncFlushTimeout (ms)
    client_channel_expired_ms: int = 120_000  # a client silent this long is dropped
    transaction_time_out: int = 6000  # transactionTimeOut (ms): a half message younger than this is not checked
    transaction_check_max: int = 15  # transactionCheckMax: checks before a half message is discarded
    transaction_check_interval: int = 60_000  # transactionCheckInterval (ms) between check-back rounds
    # sparkmq moves data in bulk: Java caps a pull at 32 messages / 256 KiB; clients ask for less anyway.
    max_transfer_count_on_message_in_memory: int = 4096  # maxTransferCountOnMessageInMemory
    max_transfer_bytes_on_message_in_memory: int = DEFAULT_MAX_TRANSFER_BYTES  # maxTransferBytesOnMessageInMemory
    message_delay_level: str = DEFAULT_MESSAGE_DELAY_LEVEL  # messageDelayLevel
    notify_consumer_ids_changed_enable: bool = True  # notifyConsumerIdsChangedEnable
    enable_property_filter: bool = False  # enablePropertyFilter: SQL92 subscriptions
    region_id: str = "DefaultRegion"  # regionId
    trace_on: bool = True  # traceOn
    trace_topic_enable: bool = False  # traceTopicEnable: create msgTraceTopicName at start
    msg_trace_topic_name: str = TRACE_TOPIC  # msgTraceTopicName
    # Hostile peers (sparkmq keys except the first): 0 connections = half the descriptor limit.
    server_channel_max_idle_time_seconds: float = IDLE_TIMEOUT_S  # serverChannelMaxIdleTimeSeconds
    server_max_connections: int = 0  # serverMaxConnections
    server_frame_deadline_seconds: float = FRAME_DEADLINE_S  # serverFrameDeadlineSeconds
    server_max_buffered_frame_bytes: int = MAX_BUFFERED_FRAME_BYTES  # serverMaxBufferedFrameBytes
    max_topic_queue_nums: int = 1024  # maxTopicQueueNums: read/write queues an admin may give a topic
    max_subscription_group_nums: int = 10_000  # maxSubscriptionGroupNums: groups auto-creation stops at
    metrics_exporter_type: str = "DISABLE"  # metricsExporterType: DISABLE or PROM (RocketMQ 5)
    metrics_prom_exporter_host: str = ""  # metricsPromExporterHost, "" = brokerIP1
    metrics_prom_exporter_port: int = 5557  # metricsPromExporterPort (0 picks a free port)
    enable_grpc_server: bool = False  # enableGrpcServer: serve RocketMQ 5 gRPC clients (docs/grpc.md)
    grpc_server_port: int = 8081  # grpcServerPort (0 picks a free port)
    default_invisible_time_mills: int = 60_000  # defaultInvisibleTimeMills: a gRPC receive without one (auto-renewed)
    # initPopOffsetByCheckMsgInMem: a new POP group starting from the end (initMode MAX, gRPC) starts at the first
    # message instead when the queue still has it and it lies within the in-memory window
    init_pop_offset_by_check_msg_in_mem: bool = True
    acl_enable: bool = False  # aclEnable: check every request against the ACL 1.0 accounts file
    acl_file: Path | None = None  # aclFile (sparkmq; RocketMQ: -Drocketmq.acl.plain.file), see acl_path()
    acl_reload_interval_ms: int = 1000  # aclReloadIntervalMs (sparkmq): how often the file is looked at
    tls_enable: bool = False  # tlsEnable: serve TLS (Python ssl) in tlsServerMode
    tls_server_mode: str = "permissive"  # tls.server.mode: permissive (TLS and plain) | enforcing | disabled
    tls_server_cert_path: Path | None = None  # tls.server.certPath (PEM)
    tls_server_key_path: Path | None = None  # tls.server.keyPath (PEM, unencrypted)
    # RocketMQ 5's controller mode (automatic failover): the controller decides the role and brokerId.
    enable_controller_mode: bool = False  # enableControllerMode
    controller_addr: str = ""  # controllerAddr, "host:port;host:port"
    controller_heart_beat_timeout_mills: int = 10_000  # controllerHeartBeatTimeoutMills
    broker_heartbeat_interval: int = 1000  # brokerHeartbeatInterval (ms)
    sync_broker_metadata_period: int = 5000  # syncBrokerMetadataPeriod (ms): ask the controller for the master
    check_sync_state_set_period: int = 5000  # checkSyncStateSetPeriod (ms): a master reviews its SyncStateSet
    ha_max_time_slave_not_catchup: int = 15_000  # haMaxTimeSlaveNotCatchup (ms): lagging longer leaves the set
    all_ack_in_sync_state_set: bool = False  # allAckInSyncStateSet: a SYNC send waits for every member
    in_sync_replicas: int = 1  # inSyncReplicas: replicas (master included) a SYNC send waits for
    min_in_sync_replicas: int = 1  # minInSyncReplicas: a smaller SyncStateSet refuses SYNC_MASTER sends
    # Topics as Delta tables (docs/tables.md): "" = off; a local path or a URL deltalake writes (s3://, gs://, ...).
    table_topic_root: str = ""  # tableTopicRoot: the table of topic T lives at <tableTopicRoot>/<T>
    table_topic_commit_interval_ms: int = 5000  # tableTopicCommitIntervalMs: one Delta commit per interval
    table_topic_compact_interval_ms: int = 600_000  # tableTopicCompactIntervalMs: compaction + vacuum; 0: never
    table_topic_vacuum_retention_hours: int = 168  # tableTopicVacuumRetentionHours: files older versions read
    # tableTopicStorageOptions: deltalake storage options, `key=value` separated by commas (e.g. the S3 endpoint)
    table_topic_storage_options: str = ""
    config_file: Path | None = None  # the broker.conf given with -c (not a key): updateBrokerConfig writes there

    def __post_init__(self) -> None:
        if not 0 <= self.listen_port <= 65535:
            raise ConfigError(f"listenPort {self.listen_port} is not a TCP port")
        if not 0 < self.max_message_size <= MAX_MESSAGE_SIZE_LIMIT:
            raise ConfigError(
                f"maxMessageSize {self.max_message_size} does not fit the remoting frame limit of {MAX_FRAME_BYTES} "
                f"bytes: a stored message must travel in one frame with {FRAME_HEADER_RESERVE_BYTES} bytes for its "
                f"header, so maxMessageSize may be at most {MAX_MESSAGE_SIZE_LIMIT}"
            )
        for key, value in (
            ("maxTopicQueueNums", self.max_topic_queue_nums),
            ("maxSubscriptionGroupNums", self.max_subscription_group_nums),
        ):
            if value <= 0:
                raise ConfigError(f"{key} {value} must be positive")
        if not 0 < self.default_topic_queue_nums <= self.max_topic_queue_nums:
            raise ConfigError(
                f"defaultTopicQueueNums {self.default_topic_queue_nums} must be in "
                f"1..maxTopicQueueNums ({self.max_topic_queue_nums})"
            )
        if self.table_topic_root.startswith("memory://"):
            raise ConfigError(
                "tableTopicRoot memory:// cannot hold a table between commits (deltalake opens a new memory "
                "store per handle): give a directory or an object-store URL"
            )
        self.table_storage_options()  # a malformed entry fails the start, naming it
        if self.table_topic_commit_interval_ms <= 0:
            raise ConfigError(f"tableTopicCommitIntervalMs {self.table_topic_commit_interval_ms} must be positive")
        if self.table_topic_compact_interval_ms < 0:
            raise ConfigError(
                f"tableTopicCompactIntervalMs {self.table_topic_compact_interval_ms} must not be negative"
            )
        if self.table_topic_vacuum_retention_hours < 0:
            raise ConfigError(
                f"tableTopicVacuumRetentionHours {self.table_topic_vacuum_retention_hours} must not be negative"
            )
        if self.enable_controller_mode and not self.controller_addresses():
            raise ConfigError("enableControllerMode=true needs controllerAddr")
        if self.metrics_exporter_type not in ("DISABLE", "PROM"):
            raise ConfigError(
                f"metricsExporterType {self.metrics_exporter_type!r} is not one sparkmq serves (DISABLE or PROM)"
            )
        for key in ("diskMaxUsedSpaceRatio", "diskSpaceCleanForciblyRatio", "diskSpaceWarningLevelRatio"):
            if not 0 <= getattr(self, _field_of(key)) <= 100:
                raise ConfigError(f"{key} {getattr(self, _field_of(key))} is not a percentage (0..100)")
        if self.tls_server_mode not in TLS_SERVER_MODES:
            raise ConfigError(f"tls.server.mode {self.tls_server_mode!r} is not one of {', '.join(TLS_SERVER_MODES)}")
        if self.tls_on and (self.tls_server_cert_path is None or self.tls_server_key_path is None):
            raise ConfigError("tlsEnable=true needs tls.server.certPath and tls.server.keyPath (PEM files)")
        if self.broker_role not in BROKER_ROLES:
            raise ConfigError(f"brokerRole {self.broker_role!r} is not one of {', '.join(BROKER_ROLES)}")
        if not self.enable_controller_mode and (self.broker_role == "SLAVE") != (self.broker_id > 0):
            raise ConfigError(
                f"brokerId {self.broker_id} does not fit brokerRole {self.broker_role}: "
                "a master has brokerId 0, a slave brokerId >= 1"
            )
        if self.transient_store_pool_enable and (self.broker_role == "SLAVE" or self.enable_controller_mode):
            raise ConfigError(
                "transientStorePoolEnable=true is for a master: a slave (or a broker in controller mode, which "
                "may become one) writes what it replicates through the CommitLog's mapping"
            )
        if self.transient_store_pool_size <= 0 or self.commit_interval_commit_log <= 0:
            raise ConfigError(
                f"transientStorePoolSize {self.transient_store_pool_size} and commitIntervalCommitLog "
                f"{self.commit_interval_commit_log} must be positive"
            )
        if not 0 <= self.access_message_in_memory_max_ratio <= 100:
            raise ConfigError(
                f"accessMessageInMemoryMaxRatio {self.access_message_in_memory_max_ratio} is not a percentage (0..100)"
            )
        for key in (
            "haSendHeartbeatInterval",
            "haTransferBatchSize",
            "haSlaveFallbehindMax",
            "slaveSynchronizeInterval",
            "maxHashSlotNum",
            "maxIndexNum",
            "mapedFileSizeConsumeQueue",
            "cleanResourceInterval",
            "aclReloadIntervalMs",
            "controllerHeartBeatTimeoutMills",
            "brokerHeartbeatInterval",
            "syncBrokerMetadataPeriod",
            "checkSyncStateSetPeriod",
            "haMaxTimeSlaveNotCatchup",
            "inSyncReplicas",
        ):
            if getattr(self, _field_of(key)) <= 0:
                raise ConfigError(f"{key} {getattr(self, _field_of(key))} must be positive")

    @property
    def tls_on(self) -> bool:
        """Whether the server speaks TLS at all (tlsEnable and a mode other than disabled)."""
        return self.tls_enable and self.tls_server_mode != "disabled"

    def server_tls(self) -> ServerTls | None:
        """The remoting server's TLS (None: plain only); reads the PEM files, ConfigError if unusable."""
        if not self.tls_on:
            return None
        assert self.tls_server_cert_path is not None and self.tls_server_key_path is not None
        try:
            context = server_context(self.tls_server_cert_path, self.tls_server_key_path)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"tls.server.certPath / keyPath cannot be loaded: {exc}") from exc
        return ServerTls(context, self.tls_server_mode)

    def acl_path(self) -> Path:
        """aclFile, else ``conf/plain_acl.yml`` (the CLI puts it beside the broker.conf it read)."""
        return self.acl_file if self.acl_file is not None else Path("conf") / "plain_acl.yml"

    @property
    def is_slave(self) -> bool:
        return self.broker_role == "SLAVE"

    @property
    def address(self) -> str:
        """``brokerIP1:listenPort``: what the NameServer hands to clients."""
        return f"{self.broker_ip}:{self.listen_port}"

    @property
    def ha_address(self) -> str:
        """``brokerIP1:haListenPort``: where slaves connect (``haServerAddr`` in registrations)."""
        port = self.listen_port + 1 if self.ha_listen_port < 0 else self.ha_listen_port
        return f"{self.broker_ip}:{port}"

    def to_properties(self) -> dict[str, str]:
        """Every setting under its broker.conf key, as text (GET_BROKER_CONFIG's answer)."""
        values = {key: getattr(self, known.field) for key, known in BROKER_CONF_KEYS.items() if known.field}
        return {
            key: (
                ""
                if v is None
                else str(v).lower()
                if isinstance(v, bool)
                else v.value
                if isinstance(v, FlushDiskType)
                else str(v.absolute())  # the store as a reader on this host finds it, whatever its cwd
                if isinstance(v, Path)
                else str(v)
            )
            for key, v in values.items()
        }

    def namesrv_addresses(self) -> list[str]:
        return [a.strip() for a in self.namesrv_addr.split(";") if a.strip()]

    def controller_addresses(self) -> list[str]:
        return [a.strip() for a in self.controller_addr.split(";") if a.strip()]

    def table_storage_options(self) -> dict[str, str]:
        """``tableTopicStorageOptions`` as deltalake's ``storage_options`` (empty: deltalake reads the AWS_* env)."""
        options = {}
        for entry in filter(None, (e.strip() for e in self.table_topic_storage_options.split(","))):
            key, equals, value = entry.partition("=")
            if not equals or not key.strip():
                raise ConfigError(f"tableTopicStorageOptions entry {entry!r} is not key=value")
            options[key.strip()] = value.strip()
        return options

    def server_limits(self) -> ServerLimits:
        """What the remoting server allows each peer (and all of them together)."""
        return ServerLimits(
            self.server_max_connections or None,
            self.server_channel_max_idle_time_seconds,
            self.server_frame_deadline_seconds,
            self.server_max_buffered_frame_bytes,
        )

    def store_config(self) -> StoreConfig:
        """The store's settings derived from this broker's."""
        return StoreConfig(
            root_dir=self.store_path_root_dir,
            commitlog_dir_override=self.store_path_commit_log,
            commitlog_file_bytes=self.mapped_file_size_commit_log,
            consume_queue_units_per_file=max(self.mapped_file_size_consume_queue // 20, 1),
            index_hash_slots=self.max_hash_slot_num,
            index_entries=self.max_index_num,
            max_message_bytes=self.max_message_size,
            flush_disk_type=self.flush_disk_type,
            transient_store_pool_enable=self.transient_store_pool_enable,
            transient_store_pool_size=self.transient_store_pool_size,
            commit_interval_commitlog_ms=self.commit_interval_commit_log,
            sync_flush_timeout_ms=self.sync_flush_timeout,
            file_reserved_time_hours=self.file_reserved_time,
            delete_when=self.delete_when,
            disk_max_used_space_ratio=self.disk_max_used_space_ratio / 100,
            disk_space_clean_forcibly_ratio=self.disk_space_clean_forcibly_ratio / 100,
            disk_space_warning_level_ratio=self.disk_space_warning_level_ratio / 100,
            clean_file_forcibly_enable=self.clean_file_forcibly_enable,
            clean_resource_interval_ms=self.clean_resource_interval,
            message_delay_level=self.message_delay_level,
            store_host=Host(ipv4_bytes(self.broker_ip), self.listen_port),
        )

    @classmethod
    def from_properties(cls, properties: Mapping[str, str], **overrides: Any) -> BrokerConfig:
        """Build from broker.conf ``properties`` (RocketMQ key names), then apply ``overrides``.

        A key missing from :data:`BROKER_CONF_KEYS` is logged and ignored; a key that is known but
        not honoured is checked like any other and logged as having no effect.
        """
        values: dict[str, Any] = {}
        for key, raw in properties.items():
            known = BROKER_CONF_KEYS.get(BROKER_CONF_ALIASES.get(key, key))
            if known is None:
                logger.warning("broker.conf key %r is not one sparkmq knows; ignored", key)
                continue
            if known.not_honoured:
                logger.warning("broker.conf key %s=%s is not honoured: %s", key, raw, known.not_honoured)
            if known.field is not None:
                values[known.field] = _convert(key, known.field, raw.strip())
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


class ConfKey(NamedTuple):
    """One broker.conf key: the :class:`BrokerConfig` field it sets and, when sparkmq does not act
    on it (yet), why; such a key is still parsed and checked."""

    field: str | None
    not_honoured: str = ""


#: Other spellings of keys in the table (RocketMQ's system-property and camelCase forms of the TLS keys).
BROKER_CONF_ALIASES = {
    "tls.enable": "tlsEnable",
    "tlsServerMode": "tls.server.mode",
    "tlsServerCertPath": "tls.server.certPath",
    "tlsServerKeyPath": "tls.server.keyPath",
}
#: Every broker.conf key sparkmq knows, by its RocketMQ name (alphabetical). To add a key, add the
#: BrokerConfig field and one row here; tests/broker/test_config.py checks that each field has a row.
BROKER_CONF_KEYS: dict[str, ConfKey] = {
    "autoCreateSubscriptionGroup": ConfKey("auto_create_subscription_group"),
    "autoCreateTopicEnable": ConfKey("auto_create_topic_enable"),
    "brokerClusterName": ConfKey("broker_cluster_name"),
    "brokerIP1": ConfKey("broker_ip"),
    "brokerId": ConfKey("broker_id"),
    "brokerName": ConfKey("broker_name"),
    "brokerRole": ConfKey("broker_role"),
    "cleanFileForciblyEnable": ConfKey("clean_file_forcibly_enable"),
    "cleanResourceInterval": ConfKey("clean_resource_interval"),
    "clientChannelExpiredMs": ConfKey("client_channel_expired_ms"),
    "commitIntervalCommitLog": ConfKey("commit_interval_commit_log"),
    "defaultInvisibleTimeMills": ConfKey("default_invisible_time_mills"),
    "initPopOffsetByCheckMsgInMem": ConfKey("init_pop_offset_by_check_msg_in_mem"),
    "defaultTopicQueueNums": ConfKey("default_topic_queue_nums"),
    "deleteWhen": ConfKey("delete_when"),
    "diskMaxUsedSpaceRatio": ConfKey("disk_max_used_space_ratio"),
    "diskSpaceCleanForciblyRatio": ConfKey("disk_space_clean_forcibly_ratio"),
    "diskSpaceWarningLevelRatio": ConfKey("disk_space_warning_level_ratio"),
    "enableGrpcServer": ConfKey("enable_grpc_server"),
    "enablePropertyFilter": ConfKey("enable_property_filter"),
    "fileReservedTime": ConfKey("file_reserved_time"),
    "flushConsumerOffsetInterval": ConfKey("flush_consumer_offset_interval"),
    "flushDiskType": ConfKey("flush_disk_type"),
    "grpcServerPort": ConfKey("grpc_server_port"),
    "listenHost": ConfKey("listen_host"),
    "listenPort": ConfKey("listen_port"),
    "longPollingEnable": ConfKey("long_polling_enable"),
    "mapedFileSizeCommitLog": ConfKey("mapped_file_size_commit_log"),
    "mapedFileSizeConsumeQueue": ConfKey("mapped_file_size_consume_queue"),
    "maxHashSlotNum": ConfKey("max_hash_slot_num"),
    "maxIndexNum": ConfKey("max_index_num"),
    "maxMessageSize": ConfKey("max_message_size"),
    "maxSubscriptionGroupNums": ConfKey("max_subscription_group_nums"),
    "maxTopicQueueNums": ConfKey("max_topic_queue_nums"),
    "maxTransferBytesOnMessageInMemory": ConfKey("max_transfer_bytes_on_message_in_memory"),
    "maxTransferCountOnMessageInMemory": ConfKey("max_transfer_count_on_message_in_memory"),
    "messageDelayLevel": ConfKey("message_delay_level"),
    "msgTraceTopicName": ConfKey("msg_trace_topic_name"),
    "namesrvAddr": ConfKey("namesrv_addr"),
    "notifyConsumerIdsChangedEnable": ConfKey("notify_consumer_ids_changed_enable"),
    "regionId": ConfKey("region_id"),
    "registerNameServerPeriod": ConfKey("register_name_server_period"),
    "serverChannelMaxIdleTimeSeconds": ConfKey("server_channel_max_idle_time_seconds"),
    "serverFrameDeadlineSeconds": ConfKey("server_frame_deadline_seconds"),
    "serverMaxBufferedFrameBytes": ConfKey("server_max_buffered_frame_bytes"),
    "serverMaxConnections": ConfKey("server_max_connections"),
    "shortPollingTimeMills": ConfKey("short_polling_time_mills"),
    "storePathCommitLog": ConfKey("store_path_commit_log"),
    "storePathRootDir": ConfKey("store_path_root_dir"),
    "syncFlushTimeout": ConfKey("sync_flush_timeout"),
    "traceOn": ConfKey("trace_on"),
    "traceTopicEnable": ConfKey("trace_topic_enable"),
    "transactionCheckInterval": ConfKey("transaction_check_interval"),
    "transactionCheckMax": ConfKey("transaction_check_max"),
    "transactionTimeOut": ConfKey("transaction_time_out"),
    "transientStorePoolEnable": ConfKey("transient_store_pool_enable"),
    "transientStorePoolSize": ConfKey("transient_store_pool_size"),
    # Java tuning keys common in broker.conf files: read, and said to have no effect here.
    "sendMessageThreadPoolNums": ConfKey(None, "sparkmq serves requests on one event loop, not a thread pool"),
    "pullMessageThreadPoolNums": ConfKey(None, "sparkmq serves requests on one event loop, not a thread pool"),
    "useReentrantLockWhenPutMessage": ConfKey(None, "the store's put lock is a plain lock"),
    "accessMessageInMemoryMaxRatio": ConfKey("access_message_in_memory_max_ratio"),
    "aclEnable": ConfKey("acl_enable"),
    "aclFile": ConfKey("acl_file"),
    "aclReloadIntervalMs": ConfKey("acl_reload_interval_ms"),
    "haListenPort": ConfKey("ha_listen_port"),
    "haMasterAddress": ConfKey("ha_master_address"),
    "haSendHeartbeatInterval": ConfKey("ha_send_heartbeat_interval"),
    "haSlaveFallbehindMax": ConfKey("ha_slave_fallbehind_max"),
    "haTransferBatchSize": ConfKey("ha_transfer_batch_size"),
    "metricsExporterType": ConfKey("metrics_exporter_type"),
    "metricsPromExporterHost": ConfKey("metrics_prom_exporter_host"),
    "metricsPromExporterPort": ConfKey("metrics_prom_exporter_port"),
    "slaveReadEnable": ConfKey("slave_read_enable"),
    "slaveSynchronizeInterval": ConfKey("slave_synchronize_interval"),
    "tls.server.certPath": ConfKey("tls_server_cert_path"),
    "tls.server.keyPath": ConfKey("tls_server_key_path"),
    "tls.server.mode": ConfKey("tls_server_mode"),
    "tlsEnable": ConfKey("tls_enable"),
    "allAckInSyncStateSet": ConfKey("all_ack_in_sync_state_set"),
    "brokerHeartbeatInterval": ConfKey("broker_heartbeat_interval"),
    "checkSyncStateSetPeriod": ConfKey("check_sync_state_set_period"),
    "controllerAddr": ConfKey("controller_addr"),
    "controllerHeartBeatTimeoutMills": ConfKey("controller_heart_beat_timeout_mills"),
    "enableControllerMode": ConfKey("enable_controller_mode"),
    "haMaxTimeSlaveNotCatchup": ConfKey("ha_max_time_slave_not_catchup"),
    "inSyncReplicas": ConfKey("in_sync_replicas"),
    "minInSyncReplicas": ConfKey("min_in_sync_replicas"),
    "syncBrokerMetadataPeriod": ConfKey("sync_broker_metadata_period"),
    "tableTopicRoot": ConfKey("table_topic_root"),
    "tableTopicCommitIntervalMs": ConfKey("table_topic_commit_interval_ms"),
    "tableTopicCompactIntervalMs": ConfKey("table_topic_compact_interval_ms"),
    "tableTopicStorageOptions": ConfKey("table_topic_storage_options"),
    "tableTopicVacuumRetentionHours": ConfKey("table_topic_vacuum_retention_hours"),
}
_TYPES = {f.name: f.type for f in dataclasses.fields(BrokerConfig)}


def _field_of(key: str) -> str:
    """The BrokerConfig field of a key that has one."""
    field = BROKER_CONF_KEYS[key].field
    assert field is not None, key
    return field


def _convert(key: str, name: str, raw: str) -> Any:
    kind = _TYPES[name]
    try:
        if kind == "bool":
            if raw.lower() not in ("true", "false"):
                raise ValueError(raw)
            return raw.lower() == "true"
        if kind == "int":
            return int(raw)
        if kind == "float":
            return float(raw)
        if kind == "FlushDiskType":
            return FlushDiskType(raw)
        if kind in ("Path", "Path | None"):
            return Path(raw)
        return raw
    except ValueError as exc:
        raise ConfigError(f"broker.conf {key}={raw!r} is not a valid {kind}") from exc


def parse_properties(text: str, source: str = "broker.conf") -> dict[str, str]:
    """Parse Java ``.properties`` text the way ``java.util.Properties.load`` does.

    Keys and values are separated by ``=``, ``:`` or whitespace; a line ending in ``\\`` continues
    on the next; ``\\t``, ``\\uXXXX`` and the other escapes are decoded; ``#`` and ``!`` start
    comments. A later duplicate key wins. Raises :class:`ConfigError` naming ``source`` for text
    that is not properties (a broken ``\\u`` escape).

    >>> parse_properties("# c\\nbrokerName = b1\\nlistenPort 10911\\nnamesrvAddr=a:1;\\\\\\n    b:2\\n")
    {'brokerName': 'b1', 'listenPort': '10911', 'namesrvAddr': 'a:1;b:2'}
    """
    properties = Properties()
    try:
        properties.load(text, "utf-8")
    except PropertyError as exc:
        raise ConfigError(f"{source} is not a Java properties file: {exc}") from exc
    return {str(key): str(value) for key, value in properties.properties.items()}
