"""GET_CONSUME_STATS's body (``ConsumeStats``), apart from the other admin bodies.

A consumer asks it to learn which topics its group has offsets for (the Spark source's first
batch does, in Spark's per-query runner); ``admin_bodies`` re-exports it with the rest of the
mqadmin statistics, whose import (the heartbeat codecs, a dataclass each) that question need not pay.

Example::

    >>> stats = ConsumeStats.decode(b'{"consumeTps":0.0,"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:'
    ...                             b'{"brokerOffset":5,"consumerOffset":3,"lastTimestamp":0}}}')
    >>> [(mq.topic, o.consumer_offset) for mq, o in stats.offset_table.items()]
    [('T', 3)]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Self

from .bodies import MessageQueue
from .fastjson import as_object, dumps, get_float, get_int, loads, object_keyed_map

_Data = bytes | bytearray | memoryview | str


def _load(data: _Data, what: str) -> dict[str, Any]:
    return as_object(loads(data, what=what), what)


def _queue_keyed(obj: dict[str, Any], path: str) -> list[tuple[MessageQueue, Any]]:
    table = as_object(obj.get(path) or {}, path)
    return [(MessageQueue.from_json(loads(k, what=path), f"{path} key"), v) for k, v in table.items()]


@dataclass(frozen=True, slots=True)
class OffsetWrapper:
    """One queue of GET_CONSUME_STATS (208)."""

    broker_offset: int
    consumer_offset: int
    last_timestamp: int = 0


@dataclass(frozen=True, slots=True)
class ConsumeStats:
    """Body of GET_CONSUME_STATS: one entry per read queue, plus ``consumeTps``."""

    offset_table: dict[MessageQueue, OffsetWrapper] = field(default_factory=dict)
    consume_tps: float = 0.0

    def encode(self) -> bytes:
        """fastjson's object-keyed form (``consumeTps`` as a double, e.g. ``0.0``)."""
        entries = [
            (
                mq.to_json(),
                {
                    "brokerOffset": o.broker_offset,
                    "consumerOffset": o.consumer_offset,
                    "lastTimestamp": o.last_timestamp,
                },
            )
            for mq, o in self.offset_table.items()
        ]
        text = '{"consumeTps":' + dumps(float(self.consume_tps)) + ',"offsetTable":' + object_keyed_map(entries) + "}"
        return text.encode("utf-8")

    @classmethod
    def decode(cls, data: _Data) -> Self:
        """Parse fastjson's object-keyed form."""
        obj = _load(data, cls.__name__)
        table = {}
        for mq, value in _queue_keyed(obj, "offsetTable"):
            o = as_object(value, "offsetTable value")
            table[mq] = OffsetWrapper(
                get_int(o, "brokerOffset", "offsetTable", 0),
                get_int(o, "consumerOffset", "offsetTable", 0),
                get_int(o, "lastTimestamp", "offsetTable", 0),
            )
        return cls(table, get_float(obj, "consumeTps", cls.__name__, 0.0))


__all__ = ["ConsumeStats", "OffsetWrapper"]
