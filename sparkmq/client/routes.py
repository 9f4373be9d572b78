"""Topic routes: which queues a topic has on which brokers, from GET_ROUTEINFO_BY_TOPIC."""

from __future__ import annotations

from dataclasses import dataclass

from sparkmq.message.names import MASTER_ID
from sparkmq.protocol import PermName
from sparkmq.protocol.bodies import MessageQueue, TopicRouteData


@dataclass(frozen=True, slots=True)
class TopicRoute:
    """A topic's route with the queue lists producers and consumers use."""

    topic: str
    data: TopicRouteData

    def master_address(self, broker_name: str) -> str | None:
        for broker in self.data.broker_datas:
            if broker.broker_name == broker_name:
                return broker.broker_addrs.get(MASTER_ID)
        return None

    def read_addresses(self, broker_name: str, preferred_id: int = MASTER_ID) -> list[str]:
        """Where to read ``broker_name``'s queues, best first: ``preferred_id`` (a pull's
        ``suggestWhichBrokerId``), then the master, then the slaves by id
        (``findBrokerAddressInSubscribe`` with its fallback to any broker of the name)."""
        for broker in self.data.broker_datas:
            if broker.broker_name == broker_name:
                addrs = broker.broker_addrs
                order = [preferred_id, MASTER_ID, *sorted(addrs)]
                return list(dict.fromkeys(addrs[i] for i in order if i in addrs))
        return []

    def broker_addresses(self) -> list[str]:
        return sorted({addr for b in self.data.broker_datas for addr in b.broker_addrs.values()})

    def publish_queues(self) -> list[MessageQueue]:
        """Writable queues on brokers with a master, sorted by broker name (``topicRouteData2TopicPublishInfo``)."""
        queues = []
        for q in sorted(self.data.queue_datas, key=lambda q: q.broker_name):
            if q.perm & PermName.PERM_WRITE and self.master_address(q.broker_name):
                queues += [MessageQueue(self.topic, q.broker_name, i) for i in range(q.write_queue_nums)]
        return queues

    def subscribe_queues(self) -> list[MessageQueue]:
        """Readable queues (``topicRouteData2TopicSubscribeInfo``)."""
        queues = []
        for q in sorted(self.data.queue_datas, key=lambda q: q.broker_name):
            if q.perm & PermName.PERM_READ:
                queues += [MessageQueue(self.topic, q.broker_name, i) for i in range(q.read_queue_nums)]
        return queues
