"""mqadmin's group, connection, config, reset and statistics requests (Java ``AdminBrokerProcessor``).

UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200), GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201),
DELETE_SUBSCRIPTIONGROUP (207), GET_CONSUMER_CONNECTION_LIST (203), GET_PRODUCER_CONNECTION_LIST (204),
GET_BROKER_CONFIG (26), UPDATE_BROKER_CONFIG (25), INVOKE_BROKER_TO_RESET_OFFSET (222),
VIEW_BROKER_STATS_DATA (315), QUERY_TOPIC_CONSUME_BY_WHO (300), GET_CONSUMER_RUNNING_INFO (307, passed on
to the consumer named).

UPDATE_BROKER_CONFIG replaces the broker's config object after checking every value as broker.conf
is checked; settings read per request (pull limits, long polling, filters, notifications) apply at
once, those the store or the server read at start apply at the next start (Java behaves the same
for most keys). A broker started with ``-c broker.conf`` writes the updated keys into that file
first (:mod:`sparkmq.broker.conf_update`), so a restart keeps them; when that write fails, nothing
is applied and the remark says why.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json

from sparkmq.broker.conf_update import persist_updates
from sparkmq.broker.config import BROKER_CONF_KEYS, BrokerConfig
from sparkmq.broker.context import BrokerContext
from sparkmq.broker.subscriptions import SubscriptionGroupConfig
from sparkmq.broker.validation import check_group, check_topic
from sparkmq.errors import ConfigError, SparkmqError
from sparkmq.protocol import LanguageCode, RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.admin_bodies import Connection, ConsumerConnection, ResetOffsetBody
from sparkmq.protocol.admin_headers import TopicRequestHeader
from sparkmq.protocol.bodies import MessageQueue
from sparkmq.protocol.headers import (
    ConsumerGroupRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    ResetOffsetRequestHeader,
)
from sparkmq.protocol.heartbeat import ConsumeFromWhere, ConsumeType, MessageModel
from sparkmq.protocol.ops_bodies import (
    DeleteSubscriptionGroupRequestHeader,
    GetBrokerConfigResponseHeader,
    ProducerConnection,
    ProducerGroupRequestHeader,
    SubscriptionGroupBody,
    ViewBrokerStatsDataRequestHeader,
    parse_properties_text,
    properties_text,
)
from sparkmq.remoting import RemotingConnection
from sparkmq.remoting.server import Processor

# Identity is not an admin's to change on a running broker: it is how clients and the NameServer know
# it. Such keys in an update are ignored, and not written to broker.conf either.
IDENTITY_FIELDS = (
    "broker_name",
    "broker_cluster_name",
    "broker_id",
    "listen_port",
    "store_path_root_dir",
    "broker_ip",
    "listen_host",
    "config_file",
)
# Java waits 10 s; below AdminExt's own 5 s the admin gets this broker's precise answer, not its timeout.
CALL_CONSUMER_TIMEOUT_S = 3.0
LATEST_TIMESTAMP = -1  # resetOffsetByTime -s now: every queue to its max offset


class AdminOpsProcessors:
    """Processors for mqadmin's operational commands, sharing one broker context."""

    def __init__(self, context: BrokerContext) -> None:
        self.ctx = context
        self.config_version = 0

    def table(self) -> dict[RequestCode, Processor]:
        """Request code → processor."""
        return {
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self.update_group,
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self.all_groups,
            RequestCode.DELETE_SUBSCRIPTIONGROUP: self.delete_group,
            RequestCode.GET_CONSUMER_CONNECTION_LIST: self.consumer_connections,
            RequestCode.GET_PRODUCER_CONNECTION_LIST: self.producer_connections,
            RequestCode.GET_BROKER_CONFIG: self.broker_config,
            RequestCode.UPDATE_BROKER_CONFIG: self.update_broker_config,
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: self.reset_offset,
            RequestCode.VIEW_BROKER_STATS_DATA: self.view_stats,
            RequestCode.GET_CONSUMER_RUNNING_INFO: self.consumer_running_info,
            RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: self.consumed_by,
        }

    async def consumed_by(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        """QUERY_TOPIC_CONSUME_BY_WHO: groups subscribed to the topic now, or holding an offset on it (GroupList)."""
        topic = TopicRequestHeader.from_fields(request.ext_fields).topic
        check_topic(topic)
        online = {g for g, info in self.ctx.clients.consumers.items() if topic in info.subscriptions}
        groups = sorted(online | self.ctx.offsets.groups_of_topic(topic))
        return request.make_response(body=json.dumps({"groupList": groups}, separators=(",", ":")).encode())

    async def update_group(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        body = SubscriptionGroupBody.decode(request.body)
        self.ctx.groups.update(
            SubscriptionGroupConfig(
                body.group_name,
                body.consume_enable,
                body.retry_queue_nums,
                body.retry_max_times,
                body.consume_message_orderly,
            )
        )
        await self.ctx.persister.persist("subscriptionGroup.json")
        return request.make_response()

    async def all_groups(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        groups = self.ctx.groups.snapshot()
        body = {
            "dataVersion": {"counter": self.ctx.groups.version, "timestamp": 0},
            "subscriptionGroupTable": {name: groups[name].to_json() for name in sorted(groups)},
        }
        return request.make_response(body=json.dumps(body, separators=(",", ":")).encode())

    async def delete_group(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        h = DeleteSubscriptionGroupRequestHeader.from_fields(request.ext_fields)
        self.ctx.groups.delete(h.group_name)
        if h.clean_offset:
            self.ctx.offsets.remove_group(h.group_name)
        await self.ctx.persister.persist("subscriptionGroup.json")
        return request.make_response()

    async def consumer_connections(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        group = ConsumerGroupRequestHeader.from_fields(request.ext_fields).consumer_group
        check_group(group)
        info = self.ctx.clients.consumers.get(group)
        if info is None or not info.channels:
            return request.make_response(
                ResponseCode.CONSUMER_NOT_ONLINE, remark=f"the consumer group[{group}] not online"
            )
        connections = tuple(
            Connection(ch.client_id, _addr(ch.connection), ch.language, ch.version) for ch in info.channels.values()
        )
        data = info.data
        body = ConsumerConnection(
            connections,
            dict(info.subscriptions),
            data.consume_type if data else ConsumeType.CONSUME_PASSIVELY,
            info.message_model if data else MessageModel.CLUSTERING,
            data.consume_from_where if data else ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        )
        return request.make_response(body=body.encode())

    async def producer_connections(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        group = ProducerGroupRequestHeader.from_fields(request.ext_fields).producer_group
        check_group(group)
        channels = self.ctx.clients.producers.get(group, {})
        if not channels:
            return request.make_response(ResponseCode.SYSTEM_ERROR, remark=f"the producer group[{group}] not exist")
        rows = tuple(
            Connection(ch.client_id, _addr(ch.connection), ch.language, ch.version) for ch in channels.values()
        )
        return request.make_response(body=ProducerConnection(rows).encode())

    async def broker_config(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        version = json.dumps({"counter": self.config_version, "timestamp": 0}, separators=(",", ":"))
        return request.make_response(
            ext_fields=GetBrokerConfigResponseHeader(version).to_fields(),
            body=properties_text(self.ctx.config.to_properties()).encode(),
        )

    async def update_broker_config(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        updates = parse_properties_text(request.body)
        current = self.ctx.config.to_properties()
        unknown = sorted(set(updates) - set(current))
        if unknown:
            return request.make_response(
                ResponseCode.SYSTEM_ERROR, remark=f"unknown broker config keys: {', '.join(unknown)}"
            )
        try:
            updated = BrokerConfig.from_properties({k: v for k, v in {**current, **updates}.items() if v != ""})
        except ConfigError as exc:
            return request.make_response(ResponseCode.SYSTEM_ERROR, remark=exc.remark)
        fixed = {f: getattr(self.ctx.config, f) for f in IDENTITY_FIELDS}
        if self.ctx.config.config_file is not None:
            kept = {k: v for k, v in updates.items() if BROKER_CONF_KEYS[k].field not in IDENTITY_FIELDS}
            try:
                await asyncio.to_thread(persist_updates, self.ctx.config.config_file, kept)
            except ConfigError as exc:
                return request.make_response(ResponseCode.SYSTEM_ERROR, remark=f"not applied: {exc.remark}")
        self.ctx.config = dataclasses.replace(updated, **fixed)
        self.config_version += 1
        return request.make_response()

    async def reset_offset(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        h = ResetOffsetRequestHeader.from_fields(request.ext_fields)
        check_topic(h.topic)
        check_group(h.group)
        ctx = self.ctx
        topic = ctx.topics.get(h.topic)
        if topic is None:
            return request.make_response(
                ResponseCode.TOPIC_NOT_EXIST, remark=f"[reset offset] topic[{h.topic}] not exist"
            )
        table: dict[MessageQueue, int] = {}
        for q in range(topic.write_queue_nums):
            committed = ctx.offsets.query(h.group, h.topic, q)
            if h.timestamp == LATEST_TIMESTAMP:
                target = ctx.store.max_offset_in_queue(h.topic, q)
            else:
                target = max(ctx.store.offset_by_timestamp(h.topic, q, h.timestamp), 0)
            offset = target if h.is_force or committed < 0 or target < committed else committed
            table[MessageQueue(h.topic, ctx.config.broker_name, q)] = offset
            ctx.offsets.commit(h.group, h.topic, q, offset)
        body = ResetOffsetBody(table)
        header = ResetOffsetRequestHeader(h.topic, h.group, h.timestamp, h.is_force).to_fields()
        info = ctx.clients.consumers.get(h.group)
        for channel in info.channels.values() if info else ():
            wire = body.encode_cpp() if channel.language == LanguageCode.CPP.name else body.encode()
            channel.connection.send(
                RemotingCommand.request(
                    RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
                    channel.connection.next_opaque(),
                    ext_fields=header,
                    body=wire,
                    oneway=True,
                )
            )
        await ctx.persister.persist("consumerOffset.json")
        return request.make_response(body=body.encode())

    async def consumer_running_info(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        """Ask one member of a group for its running info (Java ``callConsumer``) and pass its answer on."""
        h = GetConsumerRunningInfoRequestHeader.from_fields(request.ext_fields)
        info = self.ctx.clients.consumers.get(h.consumer_group)
        channel = next((c for c in (info.channels.values() if info else ()) if c.client_id == h.client_id), None)
        if channel is None:
            return request.make_response(
                ResponseCode.SYSTEM_ERROR, remark=f"The Consumer <{h.consumer_group}> <{h.client_id}> not online"
            )
        forward = RemotingCommand.request(
            RequestCode.GET_CONSUMER_RUNNING_INFO, channel.connection.next_opaque(), ext_fields=h.to_fields()
        )
        try:
            answer = await channel.connection.request(forward, CALL_CONSUMER_TIMEOUT_S)
        except SparkmqError as exc:
            return request.make_response(
                ResponseCode.SYSTEM_ERROR,
                remark=f"invoke consumer <{h.consumer_group}> <{h.client_id}> Exception: {exc.remark}",
            )
        return request.make_response(answer.code, remark=answer.remark, body=answer.body)

    async def view_stats(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        h = ViewBrokerStatsDataRequestHeader.from_fields(request.ext_fields)
        try:
            data = self.ctx.stats.view(h.stats_name, h.stats_key)
        except KeyError:
            return request.make_response(
                ResponseCode.SYSTEM_ERROR, remark=f"The stats <{h.stats_name}> <{h.stats_key}> not exist"
            )
        return request.make_response(body=data.encode())


def _addr(connection: RemotingConnection) -> str:
    host, port = connection.peer[:2]
    return f"{host}:{port}"
