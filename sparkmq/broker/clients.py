"""ClientManager: producers and consumers known from heartbeats, per group, per connection.

RocketMQ's ``ConsumerManager`` + ``ProducerManager``: a heartbeat (re)registers a client's
connection under its groups; UNREGISTER_CLIENT, a closed connection or silence longer than
``expired_s`` removes it. Changes to a consumer group's member ids are reported so the
broker can send NOTIFY_CONSUMER_IDS_CHANGED. Runs inside one asyncio loop: no locking.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sparkmq.protocol.heartbeat import ConsumerData, MessageModel, SubscriptionData
from sparkmq.remoting import RemotingConnection


@dataclass(slots=True)
class ClientChannel:
    """One client's connection as a group member."""

    client_id: str
    connection: RemotingConnection
    last_update: float
    language: str = "JAVA"  # the heartbeat's LanguageCode name and version, for mqadmin's connection lists
    version: int = 0


@dataclass(slots=True)
class ConsumerGroupInfo:
    """A consumer group: its members and the subscriptions they last announced."""

    group: str
    message_model: MessageModel = MessageModel.CLUSTERING
    data: ConsumerData | None = None  # the last heartbeat's entry (consume type, where to start)
    channels: dict[int, ClientChannel] = field(default_factory=dict)  # by connection id
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)

    def client_ids(self) -> list[str]:
        return sorted({c.client_id for c in self.channels.values()})


class ClientManager:
    """Consumer and producer groups; ``clock`` is injectable for expiry tests."""

    def __init__(self, expired_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.expired_s = expired_s
        self.clock = clock
        self.consumers: dict[str, ConsumerGroupInfo] = {}
        self.producers: dict[str, dict[int, ClientChannel]] = {}

    def register_consumer(
        self,
        client_id: str,
        connection: RemotingConnection,
        data: ConsumerData,
        language: str = "JAVA",
        version: int = 0,
    ) -> bool:
        """Record a consumer's heartbeat; True when the group's member ids changed."""
        info = self.consumers.setdefault(data.group_name, ConsumerGroupInfo(data.group_name))
        before = info.client_ids()
        info.message_model = data.message_model
        info.data = data
        info.channels[connection.id] = ClientChannel(client_id, connection, self.clock(), language, version)
        for subscription in data.subscription_data_set:
            info.subscriptions[subscription.topic] = subscription
        return info.client_ids() != before

    def register_producer(
        self, client_id: str, connection: RemotingConnection, group: str, language: str = "JAVA", version: int = 0
    ) -> None:
        self.producers.setdefault(group, {})[connection.id] = ClientChannel(
            client_id, connection, self.clock(), language, version
        )

    def unregister(
        self, client_id: str, connection: RemotingConnection, producer_group: str | None, consumer_group: str | None
    ) -> list[str]:
        """Remove a client from the named groups; return consumer groups whose ids changed."""
        if producer_group:
            self.producers.get(producer_group, {}).pop(connection.id, None)
            self._drop_empty_producer_groups()
        changed = []
        info = self.consumers.get(consumer_group or "")
        if info is not None and info.channels.pop(connection.id, None) is not None:
            changed.append(info.group)
            if not info.channels:
                del self.consumers[info.group]
        return changed

    def connection_closed(self, connection: RemotingConnection) -> list[str]:
        """Drop a closed connection everywhere; return consumer groups whose ids changed."""
        for channels in self.producers.values():
            channels.pop(connection.id, None)
        self._drop_empty_producer_groups()
        return self._drop_consumer_channels(lambda ch: ch.connection.id == connection.id)

    def expire_silent(self) -> list[str]:
        """Drop (and close) members silent for longer than ``expired_s``; return changed groups."""
        deadline = self.clock() - self.expired_s
        for channels in self.producers.values():
            for key in [k for k, ch in channels.items() if ch.last_update < deadline]:
                channels.pop(key).connection.close()
        self._drop_empty_producer_groups()
        return self._drop_consumer_channels(lambda ch: ch.last_update < deadline, close=True)

    def _drop_empty_producer_groups(self) -> None:
        for group in [g for g, channels in self.producers.items() if not channels]:
            del self.producers[group]

    def _drop_consumer_channels(self, doomed: Callable[[ClientChannel], bool], close: bool = False) -> list[str]:
        changed = []
        for info in list(self.consumers.values()):
            gone = [key for key, ch in info.channels.items() if doomed(ch)]
            for key in gone:
                channel = info.channels.pop(key)
                if close:
                    channel.connection.close()
            if gone:
                changed.append(info.group)
            if not info.channels:
                del self.consumers[info.group]
        return changed

    def consumer_ids(self, group: str) -> list[str]:
        info = self.consumers.get(group)
        return info.client_ids() if info else []

    def consumer_connections(self, group: str) -> list[RemotingConnection]:
        info = self.consumers.get(group)
        return [ch.connection for ch in info.channels.values()] if info else []

    def subscription(self, group: str, topic: str) -> SubscriptionData | None:
        info = self.consumers.get(group)
        return info.subscriptions.get(topic) if info else None
