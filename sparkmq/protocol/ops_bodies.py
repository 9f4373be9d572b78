"""Headers and bodies of the mqadmin commands a broker serves beyond topics and offsets.

Java 4.9.7 names: ``GetProducerConnectionListRequestHeader``, ``DeleteSubscriptionGroupRequestHeader``,
``ViewBrokerStatsDataRequestHeader``, ``GetBrokerConfigResponseHeader``, ``ProducerConnection``,
``BrokerStatsData``/``BrokerStatsItem``, ``SubscriptionGroupConfig``, and the properties text of
GET_BROKER_CONFIG / UPDATE_BROKER_CONFIG (``MixAll.properties2String``: ``key=value`` lines).

Example::

    >>> BrokerStatsData(BrokerStatsItem(6, 0.1, 0.0)).encode()
    b'{"statsDay":{"avgpt":0.0,"sum":0,"tps":0.0},"statsHour":{"avgpt":0.0,"sum":0,"tps":0.0},"statsMinute":{"avgpt":0.0,"sum":6,"tps":0.1}}'
    >>> properties_text({"b": "2", "a": "1"})
    'a=1\\nb=2\\n'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Self

from sparkmq.errors import InvalidFieldError

from .admin_bodies import Connection
from .fastjson import as_list, as_object, dumps, get_bool, get_float, get_int, get_str, loads
from .schema import CommandHeader

_Data = bytes | bytearray | memoryview | str


@dataclass(frozen=True, slots=True)
class ProducerGroupRequestHeader(CommandHeader):
    """GET_PRODUCER_CONNECTION_LIST (204): ``producerGroup``."""

    producer_group: str


@dataclass(frozen=True, slots=True)
class DeleteSubscriptionGroupRequestHeader(CommandHeader):
    """DELETE_SUBSCRIPTIONGROUP (207); ``cleanOffset`` also drops the group's consumer offsets (5.x)."""

    group_name: str
    clean_offset: bool | None = None


@dataclass(frozen=True, slots=True)
class ViewBrokerStatsDataRequestHeader(CommandHeader):
    """VIEW_BROKER_STATS_DATA (315): ``statsName`` e.g. TOPIC_PUT_NUMS, ``statsKey`` e.g. the topic."""

    stats_name: str
    stats_key: str


@dataclass(frozen=True, slots=True)
class GetBrokerConfigResponseHeader(CommandHeader):
    """Answer header of GET_BROKER_CONFIG (26): the config's DataVersion as JSON."""

    version: str | None = None


@dataclass(frozen=True, slots=True)
class ProducerConnection:
    """Body of GET_PRODUCER_CONNECTION_LIST: ``{"connectionSet":[...]}``."""

    connection_set: tuple[Connection, ...] = ()

    def encode(self) -> bytes:
        rows = [
            {"clientAddr": c.client_addr, "clientId": c.client_id, "language": c.language, "version": c.version}
            for c in self.connection_set
        ]
        return dumps({"connectionSet": rows}).encode("utf-8")

    @classmethod
    def decode(cls, data: _Data) -> Self:
        obj = as_object(loads(data, what=cls.__name__), cls.__name__)
        rows = []
        for i, item in enumerate(as_list(obj.get("connectionSet") or [], "connectionSet")):
            c, where = as_object(item, f"connectionSet[{i}]"), f"connectionSet[{i}]"
            rows.append(
                Connection(
                    get_str(c, "clientId", where),
                    get_str(c, "clientAddr", where, ""),
                    get_str(c, "language", where, "OTHER"),
                    get_int(c, "version", where, 0),
                )
            )
        return cls(tuple(rows))


@dataclass(frozen=True, slots=True)
class BrokerStatsItem:
    """``BrokerStatsItem``: the sum over a window, its rate per second, and the mean value per event."""

    sum: int = 0
    tps: float = 0.0
    avgpt: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"avgpt": float(self.avgpt), "sum": self.sum, "tps": float(self.tps)}

    @classmethod
    def from_json(cls, value: object, path: str) -> Self:
        o = as_object(value or {}, path)
        return cls(get_int(o, "sum", path, 0), get_float(o, "tps", path, 0.0), get_float(o, "avgpt", path, 0.0))


@dataclass(frozen=True, slots=True)
class BrokerStatsData:
    """Body of VIEW_BROKER_STATS_DATA: one item per window (minute, hour, day)."""

    stats_minute: BrokerStatsItem = field(default_factory=BrokerStatsItem)
    stats_hour: BrokerStatsItem = field(default_factory=BrokerStatsItem)
    stats_day: BrokerStatsItem = field(default_factory=BrokerStatsItem)

    def encode(self) -> bytes:
        return dumps(
            {
                "statsDay": self.stats_day.to_json(),
                "statsHour": self.stats_hour.to_json(),
                "statsMinute": self.stats_minute.to_json(),
            }
        ).encode("utf-8")

    @classmethod
    def decode(cls, data: _Data) -> Self:
        obj = as_object(loads(data, what=cls.__name__), cls.__name__)
        return cls(*(BrokerStatsItem.from_json(obj.get(k), k) for k in ("statsMinute", "statsHour", "statsDay")))


@dataclass(frozen=True, slots=True)
class SubscriptionGroupBody:
    """Body of UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200): the ``SubscriptionGroupConfig`` fields sparkmq uses."""

    group_name: str
    consume_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    consume_broadcast_enable: bool = True
    consume_message_orderly: bool = False  # RocketMQ 5: the group pops FIFO

    def encode(self) -> bytes:
        return dumps(
            {
                "brokerId": 0,
                "consumeBroadcastEnable": self.consume_broadcast_enable,
                "consumeEnable": self.consume_enable,
                "consumeFromMinEnable": True,
                **({"consumeMessageOrderly": True} if self.consume_message_orderly else {}),  # RocketMQ 5 only
                "groupName": self.group_name,
                "notifyConsumerIdsChangedEnable": True,
                "retryMaxTimes": self.retry_max_times,
                "retryQueueNums": self.retry_queue_nums,
                "whichBrokerWhenConsumeSlowly": 1,
            }
        ).encode("utf-8")

    @classmethod
    def decode(cls, data: _Data) -> Self:
        path = cls.__name__
        o = as_object(loads(data, what=path), path)
        return cls(
            get_str(o, "groupName", path),
            get_bool(o, "consumeEnable", path, True),
            get_int(o, "retryQueueNums", path, 1),
            get_int(o, "retryMaxTimes", path, 16),
            get_bool(o, "consumeBroadcastEnable", path, True),
            get_bool(o, "consumeMessageOrderly", path, False),
        )


def properties_text(values: dict[str, str]) -> str:
    """``MixAll.properties2String``: ``key=value`` lines (sorted here, so answers are stable)."""
    return "".join(f"{k}={values[k]}\n" for k in sorted(values))


def parse_properties_text(data: _Data) -> dict[str, str]:
    """``MixAll.string2Properties``: ``key=value`` lines; ``#`` comments and blank lines skipped."""
    text = data if isinstance(data, str) else bytes(data).decode("utf-8")
    result: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", "!")):
            continue
        key, sep, value = stripped.partition("=")
        if not sep or not key.strip():
            raise InvalidFieldError(f"properties line {number} is not key=value: {line!r}", field="body")
        result[key.strip()] = value.strip()
    return result


__all__ = [
    "BrokerStatsData",
    "BrokerStatsItem",
    "DeleteSubscriptionGroupRequestHeader",
    "GetBrokerConfigResponseHeader",
    "ProducerConnection",
    "ProducerGroupRequestHeader",
    "SubscriptionGroupBody",
    "ViewBrokerStatsDataRequestHeader",
    "parse_properties_text",
    "properties_text",
]
