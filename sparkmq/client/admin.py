"""Admin: cluster questions operators ask: a consumer group's lag per queue, and finding messages
by business key, by unique key (the producer's msgId), by offset msgId, within a time range."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sparkmq.client import loop_thread
from sparkmq.client.instance import ClientInstance
from sparkmq.client.message import ReceivedMessage, decode_pull_body
from sparkmq.client.responses import check_response
from sparkmq.client.security import ClientSecurity
from sparkmq.errors import RemoteError
from sparkmq.message.msgid import decode_offset_msg_id
from sparkmq.protocol import RequestCode, ResponseCode
from sparkmq.protocol.admin_bodies import ConsumeStats
from sparkmq.protocol.admin_headers import GetConsumeStatsRequestHeader
from sparkmq.protocol.bodies import MessageQueue
from sparkmq.protocol.headers import QueryMessageRequestHeader, ViewMessageRequestHeader

QUERY_MAX_NUM = 64  # MQAdmin.queryMessage's maxNum
END_OF_TIME_MS = 2**62


@dataclass(frozen=True, slots=True)
class QueueLag:
    """A group's position in one queue: the broker's max offset, the group's committed offset."""

    queue: MessageQueue
    broker_offset: int
    consumer_offset: int

    @property
    def lag(self) -> int:
        return max(self.broker_offset - self.consumer_offset, 0)


class Admin:
    """Blocking admin calls to the brokers of a topic (GET_CONSUME_STATS, QUERY_MESSAGE, VIEW_MESSAGE_BY_ID).

    For example::

        with Admin("127.0.0.1:9876") as admin:
            sum(q.lag for q in admin.consumer_lag("orders-to-delta", "orders"))
            admin.query_by_key("orders", "order-42")          # every message with KEYS order-42
            admin.message_by_offset_id(send_result.offset_msg_id)
    """

    def __init__(self, namesrv_addr: str, *, security: ClientSecurity | None = None) -> None:
        self._instance = ClientInstance(namesrv_addr, security=security)

    def consumer_lag(self, group: str, topic: str) -> list[QueueLag]:
        return loop_thread.run(self._lag(group, topic))

    async def _lag(self, group: str, topic: str) -> list[QueueLag]:
        route = await self._instance.route(topic, refresh=True)
        lags = []
        for broker in sorted({q.broker_name for q in route.subscribe_queues()}):
            fields = GetConsumeStatsRequestHeader(group, topic).to_fields()
            response = await self._instance.invoke_broker(broker, RequestCode.GET_CONSUME_STATS, fields)
            stats = ConsumeStats.decode(check_response(response, f"consume stats of {group}").body)
            lags += [QueueLag(q, o.broker_offset, o.consumer_offset) for q, o in stats.offset_table.items()]
        return sorted(lags, key=lambda x: (x.queue.broker_name, x.queue.queue_id))

    def query_by_key(
        self, topic: str, key: str, max_num: int = QUERY_MAX_NUM, begin_ms: int = 0, end_ms: int = END_OF_TIME_MS
    ) -> list[ReceivedMessage]:
        """Messages of ``topic`` whose KEYS hold ``key``, stored within ``[begin_ms, end_ms]``, from every broker."""
        found = loop_thread.run(self._query(topic, key, max_num, begin_ms, end_ms, unique=False))
        return [m for m in found if key in m.keys]

    def message_by_unique_key(
        self, topic: str, unique_key: str, begin_ms: int = 0, end_ms: int = END_OF_TIME_MS
    ) -> ReceivedMessage | None:
        """The message whose unique key (the producer's msgId, UNIQ_KEY) is ``unique_key``, or None."""
        found = loop_thread.run(self._query(topic, unique_key, QUERY_MAX_NUM, begin_ms, end_ms, unique=True))
        return next((m for m in found if m.msg_id == unique_key), None)

    def message_by_offset_id(self, offset_msg_id: str) -> ReceivedMessage:
        """The message at an offset msgId (the broker's address and the CommitLog offset are in it)."""
        return loop_thread.run(self._view(offset_msg_id))

    async def _query(
        self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int, unique: bool
    ) -> list[ReceivedMessage]:
        route = await self._instance.route(topic, refresh=True)
        fields = QueryMessageRequestHeader(topic, key, max_num, begin_ms, end_ms, True if unique else None).to_fields()
        found: list[ReceivedMessage] = []
        for broker in sorted({q.broker_name for q in route.subscribe_queues()}):
            response = await self._instance.invoke_broker(broker, RequestCode.QUERY_MESSAGE, fields)
            if response.code == ResponseCode.QUERY_NOT_FOUND:
                continue
            found += decode_pull_body(check_response(response, f"query {topic} by key {key}").body, broker)
        return sorted(found, key=lambda m: m.store_timestamp)

    async def _view(self, offset_msg_id: str) -> ReceivedMessage:
        ip, port, offset = decode_offset_msg_id(offset_msg_id)  # MessageError when it is not one
        response = await self._instance.remoting.invoke(
            f"{ip}:{port}", RequestCode.VIEW_MESSAGE_BY_ID, ViewMessageRequestHeader(offset).to_fields()
        )
        messages = decode_pull_body(check_response(response, f"message {offset_msg_id}").body, "")
        if len(messages) != 1:
            raise RemoteError(f"the broker answered {len(messages)} messages for {offset_msg_id}")
        return messages[0]

    def close(self) -> None:
        loop_thread.run(self._instance.remoting.close())

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()
