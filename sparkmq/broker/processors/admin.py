"""Queue offsets, message lookups, topic administration and statistics.

GET_MAX_OFFSET, GET_MIN_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP, GET_EARLIEST_MSG_STORETIME,
VIEW_MESSAGE_BY_ID, QUERY_MESSAGE, UPDATE_AND_CREATE_TOPIC, DELETE_TOPIC_IN_BROKER,
GET_ALL_TOPIC_CONFIG, GET_TOPIC_STATS_INFO, GET_CONSUME_STATS, GET_BROKER_RUNTIME_INFO (with the keys mqadmin
and rocketmq-dashboard read: putTps, getTransferedTps, msgPutTotal*, earliestMessageTimeStamp, ...).

Every topic and group name is checked (``validation.py``) before it reaches the store or a
table; a bad one is answered SYSTEM_ERROR with the reason. Topic changes are on disk before
their answer: the reply waits for topics.json, written on a worker thread.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from importlib.metadata import PackageNotFoundError, version

from sparkmq.broker.context import BrokerContext
from sparkmq.broker.validation import check_group, check_topic
from sparkmq.message.record import decode_record
from sparkmq.protocol import DEFAULT_VERSION, RemotingCommand, ResponseCode
from sparkmq.protocol.admin_bodies import ConsumeStats, OffsetWrapper, TopicOffset, TopicStatsTable
from sparkmq.protocol.admin_headers import CreateTopicRequestHeader, GetConsumeStatsRequestHeader, TopicRequestHeader
from sparkmq.protocol.bodies import KVTable, MessageQueue
from sparkmq.protocol.headers import (
    GetEarliestMsgStoretimeResponseHeader,
    OffsetResponseHeader,
    QueryMessageRequestHeader,
    QueryMessageResponseHeader,
    SearchOffsetRequestHeader,
    TopicQueueRequestHeader,
    ViewMessageRequestHeader,
)
from sparkmq.protocol.namesrv_bodies import TopicConfig
from sparkmq.remoting import RemotingConnection
from sparkmq.store import GetMessageStatus

MAX_QUERY_MESSAGES = 64  # defaultQueryMaxNum
STATS_READER = "sparkmq-admin-stats"  # the group name a statistics read is made under


def sparkmq_version() -> str:
    """The installed distribution's version ("dev" when run from a source tree that was never installed)."""
    try:
        return version("sparkmq")
    except PackageNotFoundError:
        return "dev"


class AdminProcessors:
    """The processors of this module, sharing one broker context."""

    def __init__(self, context: BrokerContext) -> None:
        self.ctx = context
        self.started_at = time.time()

    async def max_offset(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        h = TopicQueueRequestHeader.from_fields(request.ext_fields)
        check_topic(h.topic)
        offset = self.ctx.store.max_offset_in_queue(h.topic, h.queue_id)
        return request.make_response(ext_fields=OffsetResponseHeader(offset).to_fields())

    async def min_offset(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        h = TopicQueueRequestHeader.from_fields(request.ext_fields)
        check_topic(h.topic)
        offset = self.ctx.store.min_offset_in_queue(h.topic, h.queue_id)
        return request.make_response(ext_fields=OffsetResponseHeader(offset).to_fields())

    async def search_offset(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        h = SearchOffsetRequestHeader.from_fields(request.ext_fields)
        check_topic(h.topic)
        offset = self.ctx.store.offset_by_timestamp(h.topic, h.queue_id, h.timestamp)
        return request.make_response(ext_fields=OffsetResponseHeader(offset).to_fields())

    async def earliest_time(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        h = TopicQueueRequestHeader.from_fields(request.ext_fields)
        check_topic(h.topic)
        stamp = self.ctx.store.earliest_message_time(h.topic, h.queue_id)
        return request.make_response(ext_fields=GetEarliestMsgStoretimeResponseHeader(stamp).to_fields())

    async def view_message(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        h = ViewMessageRequestHeader.from_fields(request.ext_fields)
        message = self.ctx.store.look_message_by_offset(h.offset)
        if message is None:
            return request.make_response(
                ResponseCode.SYSTEM_ERROR, remark=f"can not find message by the offset, {h.offset}"
            )
        raw = self.ctx.store.commitlog.read(h.offset, message.total_size)
        return request.make_response(body=raw or b"")

    async def query_message(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        h = QueryMessageRequestHeader.from_fields(request.ext_fields)
        check_topic(h.topic)
        found = self.ctx.store.query_messages(
            h.topic,
            h.key,
            min(h.max_num, MAX_QUERY_MESSAGES) if h.max_num > 0 else MAX_QUERY_MESSAGES,
            h.begin_timestamp,
            h.end_timestamp,
        )
        index = self.ctx.store.index
        fields = QueryMessageResponseHeader(
            index.files[-1].end_timestamp if index.files else 0, index.end_phy_offset
        ).to_fields()
        if not found:
            return request.make_response(
                ResponseCode.QUERY_NOT_FOUND,
                remark="can not find message, maybe time range not correct",
                ext_fields=fields,
            )
        body = b"".join(self.ctx.store.commitlog.read(m.physical_offset, m.total_size) or b"" for m in found)
        return request.make_response(ext_fields=fields, body=body)

    async def create_topic(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        h = CreateTopicRequestHeader.from_fields(request.ext_fields)
        check_topic(h.topic)
        if h.topic == h.default_topic:
            return request.make_response(
                ResponseCode.SYSTEM_ERROR, remark=f"the topic[{h.topic}] is conflict with system reserved words."
            )
        self.ctx.topics.update_by_admin(
            TopicConfig(
                h.topic,
                h.read_queue_nums,
                h.write_queue_nums,
                h.perm,
                h.topic_filter_type,
                h.topic_sys_flag or 0,
                h.order,
            ),
            h.attributes,
        )
        await self.ctx.persister.persist("topics.json")
        return request.make_response()

    async def delete_topic(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        h = TopicRequestHeader.from_fields(request.ext_fields)
        self.ctx.topics.delete(h.topic)  # checks the name and refuses system topics before any file is touched
        await asyncio.to_thread(
            self.ctx.store.delete_topics, [h.topic]
        )  # file work, behind the flush lock: off the loop
        self.ctx.offsets.remove_topic(h.topic)
        await self.ctx.persister.persist("topics.json")
        return request.make_response()

    async def all_topic_config(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        return request.make_response(body=self.ctx.topics.wrapper().encode())

    async def topic_stats(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        h = TopicRequestHeader.from_fields(request.ext_fields)
        check_topic(h.topic)
        topic = self.ctx.topics.get(h.topic)
        if topic is None:
            return request.make_response(ResponseCode.TOPIC_NOT_EXIST, remark=f"topic[{h.topic}] not exist")
        store = self.ctx.store
        table = {}
        for q in range(topic.write_queue_nums):
            max_offset = store.max_offset_in_queue(h.topic, q)
            table[MessageQueue(h.topic, self.ctx.config.broker_name, q)] = TopicOffset(
                store.min_offset_in_queue(h.topic, q), max_offset, self._store_time_at(h.topic, q, max_offset - 1)
            )
        return request.make_response(body=TopicStatsTable(table).encode())

    def _store_time_at(self, topic: str, queue_id: int, offset: int) -> int:
        """Store time of the message at a queue offset, 0 when there is none (Java's lastUpdateTimestamp)."""
        if offset < 0:
            return 0
        result = self.ctx.store.get_messages(STATS_READER, topic, queue_id, offset, 1)
        return decode_record(result.body()).store_timestamp if result.status is GetMessageStatus.FOUND else 0

    async def consume_stats(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        h = GetConsumeStatsRequestHeader.from_fields(request.ext_fields)
        check_group(h.consumer_group)
        if h.topic:
            check_topic(h.topic)
        ctx = self.ctx
        topics = [h.topic] if h.topic else sorted(ctx.offsets.topics_of_group(h.consumer_group))
        table: dict[MessageQueue, OffsetWrapper] = {}
        for name in topics:
            topic = ctx.topics.get(name)
            if topic is None:
                continue
            for q in range(topic.read_queue_nums):
                committed = ctx.offsets.query(h.consumer_group, name, q)
                table[MessageQueue(name, ctx.config.broker_name, q)] = OffsetWrapper(
                    ctx.store.max_offset_in_queue(name, q),
                    max(committed, 0),
                    self._store_time_at(name, q, committed - 1),
                )
        tps = sum(ctx.stats.view("GROUP_GET_NUMS", f"{name}@{h.consumer_group}").stats_minute.tps for name in topics)
        return request.make_response(body=ConsumeStats(table, tps).encode())

    async def runtime_info(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        return request.make_response(body=KVTable(self.runtime_table()).encode())

    def runtime_table(self) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO's keys that mqadmin clusterList/brokerStatus and rocketmq-dashboard read."""
        store, stats = self.ctx.store, self.ctx.stats
        put_tps, put_bytes_tps, get_tps, _get_bytes_tps = stats.tps()
        earliest = store.look_message_by_offset(store.commitlog.min_offset) if store.commitlog.max_offset else None
        disk = shutil.disk_usage(self.ctx.config.store_path_root_dir)
        info = {
            "brokerVersionDesc": f"sparkmq {sparkmq_version()}",
            "brokerVersion": str(DEFAULT_VERSION),
            "commitLogMinOffset": str(store.commitlog.min_offset),
            "commitLogMaxOffset": str(store.commitlog.max_offset),
            "bootTimestamp": str(int(self.started_at * 1000)),
            "runtime": _runtime(time.time() - self.started_at),
            "pullHoldCount": str(self.ctx.holds.parked),
            "putTps": f"{put_tps:.2f} {put_tps:.2f} {put_tps:.2f}",
            "getTransferedTps": f"{get_tps:.2f} {get_tps:.2f} {get_tps:.2f}",
            "getTotalTps": f"{get_tps:.2f} {get_tps:.2f} {get_tps:.2f}",
            "putMessageTimesTotal": str(stats.put_nums),
            "putMessageSizeTotal": str(stats.put_bytes),
            "putMessageAverageSize": f"{stats.put_bytes / stats.put_nums if stats.put_nums else 0.0:.2f}",
            "putMessageBytesTps": f"{put_bytes_tps:.2f}",
            "sendThreadPoolQueueSize": "0",
            "pullThreadPoolQueueSize": "0",
            "queryThreadPoolQueueSize": "0",
            "sendThreadPoolQueueHeadWaitTimeMills": "0",
            "pullThreadPoolQueueHeadWaitTimeMills": "0",
            "pageCacheLockTimeMills": "0",
            "earliestMessageTimeStamp": str(earliest.store_timestamp if earliest is not None else 0),
            "commitLogDiskRatio": f"{(disk.total - disk.free) / disk.total if disk.total else 0.0:.4f}",
            "dispatchBehindBytes": "0",
            "msgPutTotalTodayNow": str(stats.put_nums),
        }
        info.update((k, str(v)) for k, v in stats.morning_totals().items())
        return info


def _runtime(seconds: float) -> str:
    """Java's ``[ d days, h hours, m minutes, s seconds ]`` uptime text."""
    s = int(seconds)
    return f"[ {s // 86400} days, {s // 3600 % 24} hours, {s // 60 % 60} minutes, {s % 60} seconds ]"
