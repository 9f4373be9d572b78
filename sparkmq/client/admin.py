"""Admin: cluster questions operators ask, such as a consumer group's lag per queue."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sparkmq.client import loop_thread
from sparkmq.client.instance import ClientInstance, check_response
from sparkmq.protocol import RequestCode
from sparkmq.protocol.admin_bodies import ConsumeStats
from sparkmq.protocol.admin_headers import GetConsumeStatsRequestHeader
from sparkmq.protocol.bodies import MessageQueue


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
    """Blocking admin calls (GET_CONSUME_STATS to every broker of a topic).

    >>> # with Admin("127.0.0.1:9876") as admin:
    >>> #     sum(q.lag for q in admin.consumer_lag("orders-to-delta", "orders"))
    """

    def __init__(self, namesrv_addr: str) -> None:
        self._instance = ClientInstance(namesrv_addr)

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

    def close(self) -> None:
        loop_thread.run(self._instance.remoting.close())

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()
