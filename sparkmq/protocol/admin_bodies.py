"""JSON bodies of admin (mqadmin) statistics and broker -> client offset resets.

Maps keyed by :class:`~sparkmq.protocol.bodies.MessageQueue` (TopicStatsTable, ConsumeStats,
ResetOffsetBody) are written the way fastjson writes them, with *object* keys
(``{{"brokerName":"b","queueId":0,"topic":"T"}:{…}}``), which Java tools parse back and Python's
``json`` cannot produce.

Example::

    >>> mq = MessageQueue("T", "broker-a", 0)
    >>> TopicStatsTable({mq: TopicOffset(0, 3, 1700000000000)}).encode()
    b'{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:{"lastUpdateTimestamp":1700000000000,"maxOffset":3,"minOffset":0}}}'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Self

from .bodies import MessageQueue
from .consume_stats import ConsumeStats, OffsetWrapper, _Data, _load, _queue_keyed
from .fastjson import as_int, as_list, as_object, dumps, get_enum, get_int, get_str, object_keyed_map
from .heartbeat import ConsumeFromWhere, ConsumeType, MessageModel, SubscriptionData

# --- mqadmin statistics ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicOffset:
    """One queue of GET_TOPIC_STATS_INFO (202)."""

    min_offset: int
    max_offset: int
    last_update_timestamp: int = 0


@dataclass(frozen=True, slots=True)
class TopicStatsTable:
    """Body of GET_TOPIC_STATS_INFO: one entry per write queue."""

    offset_table: dict[MessageQueue, TopicOffset] = field(default_factory=dict)

    def encode(self) -> bytes:
        """fastjson's object-keyed form."""
        entries = [
            (
                mq.to_json(),
                {"lastUpdateTimestamp": o.last_update_timestamp, "maxOffset": o.max_offset, "minOffset": o.min_offset},
            )
            for mq, o in self.offset_table.items()
        ]
        return ('{"offsetTable":' + object_keyed_map(entries) + "}").encode("utf-8")

    @classmethod
    def decode(cls, data: _Data) -> Self:
        """Parse fastjson's object-keyed form."""
        table = {}
        for mq, value in _queue_keyed(_load(data, cls.__name__), "offsetTable"):
            o = as_object(value, "offsetTable value")
            table[mq] = TopicOffset(
                get_int(o, "minOffset", "offsetTable", 0),
                get_int(o, "maxOffset", "offsetTable", 0),
                get_int(o, "lastUpdateTimestamp", "offsetTable", 0),
            )
        return cls(table)


@dataclass(frozen=True, slots=True)
class Connection:
    """One client channel of a group (``language`` is a LanguageCode name)."""

    client_id: str
    client_addr: str
    language: str
    version: int


@dataclass(frozen=True, slots=True)
class ConsumerConnection:
    """Body of GET_CONSUMER_CONNECTION_LIST (203)."""

    connection_set: tuple[Connection, ...]
    subscription_table: dict[str, SubscriptionData]
    consume_type: ConsumeType
    message_model: MessageModel
    consume_from_where: ConsumeFromWhere

    def encode(self) -> bytes:
        """The body bytes (enums by name)."""
        obj = {
            "connectionSet": [
                {"clientAddr": c.client_addr, "clientId": c.client_id, "language": c.language, "version": c.version}
                for c in self.connection_set
            ],
            "consumeFromWhere": self.consume_from_where.name,
            "consumeType": self.consume_type.name,
            "messageModel": self.message_model.name,
            "subscriptionTable": {t: s.to_json() for t, s in sorted(self.subscription_table.items())},
        }
        return dumps(obj).encode("utf-8")

    @classmethod
    def decode(cls, data: _Data) -> Self:
        """Parse the body."""
        obj = _load(data, cls.__name__)
        path = cls.__name__
        connections = []
        for i, item in enumerate(as_list(obj.get("connectionSet"), "connectionSet")):
            c, where = as_object(item, f"connectionSet[{i}]"), f"connectionSet[{i}]"
            connections.append(
                Connection(
                    get_str(c, "clientId", where),
                    get_str(c, "clientAddr", where, ""),
                    get_str(c, "language", where, "OTHER"),
                    get_int(c, "version", where, 0),
                )
            )
        subs = as_object(obj.get("subscriptionTable") or {}, "subscriptionTable")
        return cls(
            tuple(connections),
            {t: SubscriptionData.from_json(s, f"subscriptionTable.{t}") for t, s in subs.items()},
            get_enum(obj, "consumeType", path, ConsumeType),
            get_enum(obj, "messageModel", path, MessageModel),
            get_enum(obj, "consumeFromWhere", path, ConsumeFromWhere, ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET),
        )


@dataclass(frozen=True, slots=True)
class ResetOffsetBody:
    """Body of RESET_CONSUMER_CLIENT_OFFSET (220), broker -> consumer.

    Java writes (and parses) the object-keyed map; C++ 1.2.3 parses only an *array* of
    ``{"brokerName","queueId","topic","offset"}`` (``ResetOffsetBody::Decode``): use
    :meth:`encode_cpp` for C++ consumers.
    """

    offset_table: dict[MessageQueue, int] = field(default_factory=dict)

    def encode(self) -> bytes:
        """fastjson's object-keyed form, for Java clients."""
        table = object_keyed_map((mq.to_json(), offset) for mq, offset in self.offset_table.items())
        return ('{"offsetTable":' + table + "}").encode("utf-8")

    def encode_cpp(self) -> bytes:
        """The array form rocketmq-client-cpp 1.2.3 parses."""
        rows = [{**mq.to_json(), "offset": offset} for mq, offset in self.offset_table.items()]
        return dumps({"offsetTable": rows}).encode("utf-8")

    @classmethod
    def decode(cls, data: _Data) -> Self:
        """Parse either form."""
        obj = _load(data, cls.__name__)
        table = obj.get("offsetTable")
        if isinstance(table, list):
            rows = [as_object(r, f"offsetTable[{i}]") for i, r in enumerate(table)]
            return cls({MessageQueue.from_json(r, "offsetTable"): get_int(r, "offset", "offsetTable") for r in rows})
        return cls({mq: as_int(v, "offsetTable value") for mq, v in _queue_keyed(obj, "offsetTable")})


__all__ = [
    "Connection",
    "ConsumeStats",
    "ConsumerConnection",
    "OffsetWrapper",
    "ResetOffsetBody",
    "TopicOffset",
    "TopicStatsTable",
]
