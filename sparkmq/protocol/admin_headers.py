"""Typed custom headers of NameServer and admin commands (Java 4.9.7 ``header/namesrv`` etc.).

Example::

    >>> GetRouteInfoRequestHeader.from_fields({"topic": "TopicTest", "AccessKey": ""})
    GetRouteInfoRequestHeader(topic='TopicTest', accept_standard_json_only=None)
    >>> RegisterBrokerResponseHeader().to_fields()
    {}
"""

from __future__ import annotations

from dataclasses import dataclass

from .offset_headers import GetConsumeStatsRequestHeader, GetRouteInfoRequestHeader
from .schema import CommandHeader, Int32, Int64

# --- NameServer ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RegisterBrokerRequestHeader(CommandHeader):
    """REGISTER_BROKER (103): ``bodyCrc32`` is CRC32 & 0x7FFFFFFF of the body, 0 = unchecked."""

    broker_name: str
    broker_addr: str
    cluster_name: str
    ha_server_addr: str
    broker_id: Int64
    compressed: bool = False
    body_crc32: Int32 = 0


@dataclass(frozen=True, slots=True)
class RegisterBrokerResponseHeader(CommandHeader):
    """Both None for a master; a slave learns its master's addresses."""

    ha_server_addr: str | None = None
    master_addr: str | None = None


@dataclass(frozen=True, slots=True)
class UnRegisterBrokerRequestHeader(CommandHeader):
    """UNREGISTER_BROKER (104)."""

    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: Int64


@dataclass(frozen=True, slots=True)
class KVConfigRequestHeader(CommandHeader):
    """GET_KV_CONFIG (101) / DELETE_KV_CONFIG (102)."""

    namespace: str
    key: str


@dataclass(frozen=True, slots=True)
class PutKVConfigRequestHeader(CommandHeader):
    """PUT_KV_CONFIG (100)."""

    namespace: str
    key: str
    value: str


@dataclass(frozen=True, slots=True)
class GetKVConfigResponseHeader(CommandHeader):
    """Answer to GET_KV_CONFIG."""

    value: str | None = None


@dataclass(frozen=True, slots=True)
class BrokerNameRequestHeader(CommandHeader):
    """WIPE_WRITE_PERM_OF_BROKER (205) / ADD_WRITE_PERM_OF_BROKER (327)."""

    broker_name: str


@dataclass(frozen=True, slots=True)
class WritePermResponseHeader(CommandHeader):
    """Answer to 205 (``wipeTopicCount``) or 327 (``addTopicCount``); set exactly one."""

    wipe_topic_count: Int32 | None = None
    add_topic_count: Int32 | None = None


@dataclass(frozen=True, slots=True)
class DeleteTopicFromNamesrvRequestHeader(CommandHeader):
    """DELETE_TOPIC_IN_NAMESRV (216)."""

    topic: str
    cluster_name: str | None = None


@dataclass(frozen=True, slots=True)
class GetTopicsByClusterRequestHeader(CommandHeader):
    """GET_TOPICS_BY_CLUSTER (224)."""

    cluster: str


# --- broker admin (mqadmin) ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CreateTopicRequestHeader(CommandHeader):
    """UPDATE_AND_CREATE_TOPIC (17); ``order`` is ``@CFNotNull`` in Java, so it is required."""

    topic: str
    default_topic: str
    read_queue_nums: Int32
    write_queue_nums: Int32
    perm: Int32
    topic_filter_type: str
    order: bool
    topic_sys_flag: Int32 | None = None
    attributes: str | None = None  # RocketMQ 5: "+key=value,-key" (sparkmq.tables.attributes)


@dataclass(frozen=True, slots=True)
class TopicRequestHeader(CommandHeader):
    """GET_TOPIC_STATS_INFO (202), DELETE_TOPIC_IN_BROKER (215): ``topic``."""

    topic: str


GetTopicStatsInfoRequestHeader = TopicRequestHeader
DeleteTopicRequestHeader = TopicRequestHeader


__all__ = [
    "BrokerNameRequestHeader",
    "CreateTopicRequestHeader",
    "DeleteTopicFromNamesrvRequestHeader",
    "DeleteTopicRequestHeader",
    "GetConsumeStatsRequestHeader",
    "GetKVConfigResponseHeader",
    "GetRouteInfoRequestHeader",
    "GetTopicStatsInfoRequestHeader",
    "GetTopicsByClusterRequestHeader",
    "KVConfigRequestHeader",
    "PutKVConfigRequestHeader",
    "RegisterBrokerRequestHeader",
    "RegisterBrokerResponseHeader",
    "TopicRequestHeader",
    "UnRegisterBrokerRequestHeader",
    "WritePermResponseHeader",
]
