"""GET_CONSUMER_RUNNING_INFO (307) body: what a consumer reports about itself (Java ``ConsumerRunningInfo``).

mqadmin's consumerProgress reads the queues each member holds from it (its "#Client IP" column),
consumerStatus prints all of it. Java writes ``mqTable`` as fastjson's object-keyed map; the C++
client writes the same shape by hand (and, holding no queue, a broken ``"mqTable":}``: decoding
that raises :class:`~sparkmq.errors.InvalidFieldError` like any malformed body).

>>> from sparkmq.protocol.bodies import MessageQueue
>>> info = ConsumerRunningInfo({"PROP_CONSUME_TYPE": "CONSUME_PASSIVELY"},
...     mq_table={MessageQueue("T", "broker-a", 1): ProcessQueueInfo(commit_offset=7)})
>>> ConsumerRunningInfo.decode(info.encode()).mq_table[MessageQueue("T", "broker-a", 1)].commit_offset
7
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Self

from .bodies import MessageQueue
from .fastjson import as_list, as_object, dumps, get_bool, get_float, get_int, loads, object_keyed_map
from .heartbeat import SubscriptionData

PROP_NAMESERVER_ADDR = "PROP_NAMESERVER_ADDR"
PROP_CONSUME_TYPE = "PROP_CONSUME_TYPE"
PROP_CONSUME_ORDERLY = "PROP_CONSUMEORDERLY"
PROP_THREADPOOL_CORE_SIZE = "PROP_THREADPOOL_CORE_SIZE"
PROP_CLIENT_VERSION = "PROP_CLIENT_VERSION"
PROP_CONSUMER_START_TIMESTAMP = "PROP_CONSUMER_START_TIMESTAMP"


@dataclass(frozen=True, slots=True)
class ProcessQueueInfo:
    """One held queue (Java ``ProcessQueueInfo``; the transaction fields are always 0 there too)."""

    commit_offset: int = 0
    cached_msg_min_offset: int = 0
    cached_msg_max_offset: int = 0
    cached_msg_count: int = 0
    cached_msg_size_in_mib: int = 0
    locked: bool = False
    droped: bool = False  # sic: Java's field name
    last_pull_timestamp: int = 0
    last_consume_timestamp: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "cachedMsgCount": self.cached_msg_count,
            "cachedMsgMaxOffset": self.cached_msg_max_offset,
            "cachedMsgMinOffset": self.cached_msg_min_offset,
            "cachedMsgSizeInMiB": self.cached_msg_size_in_mib,
            "commitOffset": self.commit_offset,
            "droped": self.droped,
            "lastConsumeTimestamp": self.last_consume_timestamp,
            "lastLockTimestamp": 0,
            "lastPullTimestamp": self.last_pull_timestamp,
            "locked": self.locked,
            "transactionMsgCount": 0,
            "transactionMsgMaxOffset": 0,
            "transactionMsgMinOffset": 0,
            "tryUnlockTimes": 0,
        }

    @classmethod
    def from_json(cls, value: object, path: str) -> Self:
        obj = as_object(value, path)
        return cls(
            get_int(obj, "commitOffset", path, 0),
            get_int(obj, "cachedMsgMinOffset", path, 0),
            get_int(obj, "cachedMsgMaxOffset", path, 0),
            get_int(obj, "cachedMsgCount", path, 0),
            int(get_float(obj, "cachedMsgSizeInMiB", path, 0)),
            get_bool(obj, "locked", path, False),
            get_bool(obj, "droped", path, False),
            get_int(obj, "lastPullTimestamp", path, 0),
            get_int(obj, "lastConsumeTimestamp", path, 0),
        )


@dataclass(frozen=True, slots=True)
class ConsumerRunningInfo:
    """Body of a consumer's answer to GET_CONSUMER_RUNNING_INFO."""

    properties: dict[str, str] = field(default_factory=dict)
    subscription_set: tuple[SubscriptionData, ...] = ()
    mq_table: dict[MessageQueue, ProcessQueueInfo] = field(default_factory=dict)
    jstack: str = ""

    def encode(self) -> bytes:
        """fastjson's text: ``mqTable`` object-keyed, queues in Java's ``TreeMap`` order."""
        queues = sorted(self.mq_table, key=lambda q: (q.topic, q.broker_name, q.queue_id))
        table = object_keyed_map((q.to_json(), self.mq_table[q].to_json()) for q in queues)
        rest = {
            "properties": dict(sorted(self.properties.items())),
            "statusTable": {},
            "subscriptionSet": [s.to_json() for s in self.subscription_set],
        }
        tail = dumps(rest)[1:]  # '"properties":...}' joined after the hand-written mqTable
        return ('{"jstack":' + dumps(self.jstack) + ',"mqTable":' + table + "," + tail).encode("utf-8")

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview | str) -> Self:
        """Parse Java's, the C++ client's or our own answer."""
        what = cls.__name__
        obj = as_object(loads(data, what=what), what)
        table = as_object(obj.get("mqTable") or {}, "mqTable")
        mq_table = {
            MessageQueue.from_json(loads(key, what="mqTable key"), "mqTable key"): ProcessQueueInfo.from_json(
                value, "mqTable value"
            )
            for key, value in table.items()
        }
        subs = as_list(obj.get("subscriptionSet") or [], "subscriptionSet")
        properties = as_object(obj.get("properties") or {}, "properties")
        return cls(
            {str(k): str(v) for k, v in properties.items()},
            tuple(SubscriptionData.from_json(s, f"subscriptionSet[{i}]") for i, s in enumerate(subs)),
            mq_table,
            str(obj.get("jstack") or ""),
        )
