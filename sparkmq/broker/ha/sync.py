"""SlaveSynchronize: a slave copies its master's tables every ``slaveSynchronizeInterval`` (Java: 10 s).

Four requests to the master, as RocketMQ 4.x's ``SlaveSynchronize.syncAll``: GET_ALL_TOPIC_CONFIG
(21), GET_ALL_CONSUMER_OFFSET (43), GET_ALL_DELAY_OFFSET (45) and GET_ALL_SUBSCRIPTIONGROUP_CONFIG
(201). The master's side of 43, 45 and 201 is :class:`TableSyncProcessors` (21 is the admin one).

Consumer offsets differ from Java in one way: Java's ``putAll`` lets the master overwrite an
offset a consumer committed to the slave while the master was down. Here an offset the slave
took since the last sync and that is ahead of the master's is first sent to the master
(UPDATE_CONSUMER_OFFSET) and kept, so those commits survive the master's return.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable

from sparkmq.broker.context import BrokerContext
from sparkmq.broker.schedule import ScheduleMessageService
from sparkmq.broker.subscriptions import SubscriptionGroupConfig, decode_table
from sparkmq.errors import InvalidFieldError, RemoteError
from sparkmq.offsets.offset_file import decode_offset_table, encode_offset_table
from sparkmq.offsets.table import OffsetSnapshot
from sparkmq.protocol import RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.headers import UpdateConsumerOffsetRequestHeader
from sparkmq.protocol.namesrv_bodies import TopicConfigSerializeWrapper
from sparkmq.remoting import RemotingClient, RemotingConnection

logger = logging.getLogger(__name__)
SYNC_TIMEOUT_S = 3.0


def encode_delay_offsets(offsets: dict[int, int]) -> bytes:
    """delayOffset.json's shape: ``{"offsetTable":{"1":0,...}}``."""
    return json.dumps({"offsetTable": {str(k): v for k, v in sorted(offsets.items())}}).encode()


def decode_delay_offsets(body: bytes) -> dict[int, int]:
    try:
        table = json.loads(body).get("offsetTable", {})
        return {int(level): int(offset) for level, offset in table.items()}
    except (ValueError, AttributeError) as exc:
        raise InvalidFieldError(
            f"GET_ALL_DELAY_OFFSET body is not a delay offset table: {exc}", field="offsetTable"
        ) from exc


def encode_groups(groups: dict[str, SubscriptionGroupConfig]) -> bytes:
    """SubscriptionGroupWrapper: ``{"subscriptionGroupTable":{name: config}}``."""
    return json.dumps({"subscriptionGroupTable": {name: groups[name].to_json() for name in sorted(groups)}}).encode()


def decode_groups(body: bytes) -> dict[str, SubscriptionGroupConfig]:
    try:
        return decode_table(body)
    except (ValueError, AttributeError, TypeError) as exc:
        raise InvalidFieldError(
            f"GET_ALL_SUBSCRIPTIONGROUP_CONFIG body is not a group table: {exc}", field="subscriptionGroupTable"
        ) from exc


Processor = Callable[[RemotingCommand, RemotingConnection], Awaitable[RemotingCommand]]


class TableSyncProcessors:
    """The master's answers to a slave's table requests (43, 45, 201)."""

    def __init__(self, ctx: BrokerContext, schedule: ScheduleMessageService) -> None:
        self.ctx = ctx
        self.schedule = schedule

    def table(self) -> dict[RequestCode, Processor]:
        return {
            RequestCode.GET_ALL_CONSUMER_OFFSET: self.consumer_offsets,
            RequestCode.GET_ALL_DELAY_OFFSET: self.delay_offsets,
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self.groups,
        }

    async def consumer_offsets(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        return request.make_response(body=encode_offset_table(self.ctx.offsets.snapshot()).encode())

    async def delay_offsets(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        return request.make_response(body=encode_delay_offsets(self.schedule.snapshot()))

    async def groups(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        return request.make_response(body=encode_groups(self.ctx.groups.snapshot()))


class SlaveSynchronize:
    """Pulls the master's tables into this slave's (and pushes offsets only the slave saw)."""

    def __init__(self, ctx: BrokerContext, schedule: ScheduleMessageService, client: RemotingClient) -> None:
        self.ctx = ctx
        self.schedule = schedule
        self.client = client
        self.master_addr = ""
        self._synced_offsets: OffsetSnapshot | None = None  # the slave's table right after the last sync
        self.rounds = 0  # completed syncs (tests wait on it)

    def learn_master(self, master_addr: str | None) -> None:
        """A register result named the master (an absent one keeps the last known, as Java does)."""
        if master_addr:
            self.master_addr = master_addr

    async def _fetch(self, code: RequestCode) -> bytes:
        response = await self.client.invoke(self.master_addr, code, {}, timeout=SYNC_TIMEOUT_S)
        if response.code != ResponseCode.SUCCESS:
            raise RemoteError(
                f"master {self.master_addr} answered {code.name} with {response.code} {response.remark}",
                code=response.code,
            )
        return response.body

    async def sync_all(self) -> bool:
        """One round; False when no master is known or it cannot be reached (logged). Other failures
        raise (the periodic runner logs them with their traceback)."""
        if not self.master_addr:
            return False
        try:
            await self._sync_topics()
            await self._sync_offsets()
            await self._sync_delay_offsets()
            await self._sync_groups()
        except RemoteError as exc:
            logger.warning(
                "slave %s: synchronizing from master %s failed: %s",
                self.ctx.config.broker_name,
                self.master_addr,
                exc.remark,
            )
            return False
        self.rounds += 1
        return True

    async def _sync_topics(self) -> None:
        master = TopicConfigSerializeWrapper.decode(await self._fetch(RequestCode.GET_ALL_TOPIC_CONFIG))
        topics = self.ctx.topics
        if master.data_version != topics.data_version or master.topic_config_table != topics.topics:
            topics.topics = dict(master.topic_config_table)
            topics.data_version = master.data_version
            topics.version += 1
            if topics.on_change is not None:
                topics.on_change()  # register the new table with the NameServers soon
            logger.info(
                "slave %s: %d topic configs synchronized from %s",
                self.ctx.config.broker_name,
                len(topics.topics),
                self.master_addr,
            )

    async def _sync_offsets(self) -> None:
        master = decode_offset_table((await self._fetch(RequestCode.GET_ALL_CONSUMER_OFFSET)).decode())
        table = self.ctx.offsets
        ours = table.snapshot()
        synced = self._synced_offsets if self._synced_offsets is not None else ours
        for (topic, group), queues in ours.items():
            for queue_id, offset in queues.items():
                theirs = master.get((topic, group), {}).get(queue_id, -1)
                if offset > theirs and synced.get((topic, group), {}).get(queue_id) != offset:
                    await self._push_offset(group, topic, queue_id, offset)
                    master.setdefault((topic, group), {})[queue_id] = offset
        for (topic, group), queues in master.items():
            for queue_id, offset in queues.items():
                table.commit(group, topic, queue_id, offset)
        self._synced_offsets = table.snapshot()

    async def _push_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        header = UpdateConsumerOffsetRequestHeader(group, topic, queue_id, offset).to_fields()
        response = await self.client.invoke(
            self.master_addr, RequestCode.UPDATE_CONSUMER_OFFSET, header, timeout=SYNC_TIMEOUT_S
        )
        if response.code != ResponseCode.SUCCESS:
            raise RemoteError(
                f"master {self.master_addr} refused offset {offset} of {group} on {topic}/"
                f"{queue_id}: {response.code} {response.remark}",
                code=response.code,
            )
        logger.info(
            "slave %s: offset %d of %s on %s/%d, committed here while the master was away, sent to it",
            self.ctx.config.broker_name,
            offset,
            group,
            topic,
            queue_id,
        )

    async def _sync_delay_offsets(self) -> None:
        master = decode_delay_offsets(await self._fetch(RequestCode.GET_ALL_DELAY_OFFSET))
        if master != self.schedule.offsets:
            self.schedule.offsets = master
            self.schedule.version += 1

    async def _sync_groups(self) -> None:
        master = decode_groups(await self._fetch(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
        groups = self.ctx.groups
        if master != groups.groups:
            groups.groups = master
            groups.version += 1
