"""JSON bodies of the client-facing commands, with RocketMQ's field names.

Heartbeats are in :mod:`~sparkmq.protocol.heartbeat`, a group's member list and queue locks in
:mod:`~sparkmq.protocol.group_bodies`, registration, cluster and KV bodies in
:mod:`~sparkmq.protocol.namesrv_bodies`, mqadmin statistics in :mod:`~sparkmq.protocol.admin_bodies`.

``encode()`` writes the shape both real clients parse: keys in fastjson's alphabetical order,
counts and ids as JSON numbers (C++ 1.2.3 reads ``readQueueNums``/``perm``/``queueId`` with
jsoncpp ``asInt()``, which throws on a string), and ``brokerAddrs`` keyed by the broker id as a
*quoted* string (``{"0":"ip:port"}``: both clients accept it and it is standard JSON).
``decode()`` is tolerant: fastjson's unquoted keys, enums as ordinals (C++) or names (ali-ons,
Java), absent empty sets (C++ leaves them out), a trailing newline (jsoncpp). A malformed body
raises :class:`~sparkmq.errors.InvalidFieldError`.

Example::

    >>> route = TopicRouteData(
    ...     queue_datas=(QueueData("broker-a", 4, 4, 6),),
    ...     broker_datas=(BrokerData("DefaultCluster", "broker-a", {0: "127.0.0.1:10911"}),))
    >>> route.encode()[:62]
    b'{"brokerDatas":[{"brokerAddrs":{"0":"127.0.0.1:10911"},"broker'
    >>> TopicRouteData.decode(route.encode().replace(b'"0"', b"0")) == route
    True
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import import_module
from typing import TYPE_CHECKING, Any, Self

from sparkmq.errors import InvalidFieldError

from .fastjson import (
    as_list,
    as_object,
    as_str_list,
    dumps,
    get_int,
    get_str,
    loads,
)
from .scalars import is_java_integer, java_integer

if TYPE_CHECKING:  # their old home: imported on first use (see __getattr__ at the end)
    from .group_bodies import ConsumerListBody as ConsumerListBody
    from .group_bodies import LockBatchRequestBody as LockBatchRequestBody
    from .group_bodies import LockBatchResponseBody as LockBatchResponseBody
    from .group_bodies import UnlockBatchRequestBody as UnlockBatchRequestBody
    from .namesrv_bodies import KVTable as KVTable


def _encode(obj: object) -> bytes:
    return dumps(obj).encode("utf-8")


@dataclass(frozen=True, slots=True)
class MessageQueue:
    """A queue: ``{"brokerName":…,"queueId":<number>,"topic":…}``."""

    topic: str
    broker_name: str
    queue_id: int

    def to_json(self) -> dict[str, Any]:
        """The JSON object (fastjson key order)."""
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}

    @classmethod
    def from_json(cls, value: object, path: str) -> Self:
        """Parse one MessageQueue object found at ``path``."""
        obj = as_object(value, path)
        return cls(get_str(obj, "topic", path), get_str(obj, "brokerName", path), get_int(obj, "queueId", path))


def broker_id_key(key: str, path: str) -> int:
    """A ``brokerAddrs`` key (``"0"`` or fastjson's bare ``0``, already a string) as an int."""
    if not is_java_integer(key):
        raise InvalidFieldError(f"{path} key {key[:40]!r} is not a broker id", field=path)
    return java_integer(key)


# --- route (GET_ROUTEINFO_BY_TOPIC) ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueueData:
    """One broker's queues of a topic; ``perm`` is :class:`~sparkmq.protocol.codes.PermName` bits."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def to_json(self) -> dict[str, Any]:
        """The JSON object (fastjson key order)."""
        return {
            "brokerName": self.broker_name,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_json(cls, value: object, path: str) -> Self:
        """Parse; accepts the pre-4.9 spelling ``topicSynFlag`` as well."""
        obj = as_object(value, path)
        sys_flag = get_int(obj, "topicSysFlag", path, None)
        return cls(
            get_str(obj, "brokerName", path),
            get_int(obj, "readQueueNums", path, 0),
            get_int(obj, "writeQueueNums", path, 0),
            get_int(obj, "perm", path, 0),
            get_int(obj, "topicSynFlag", path, 0) if sys_flag is None else sys_flag,
        )


@dataclass(frozen=True, slots=True)
class BrokerData:
    """A broker group: ``broker_addrs`` maps broker id (0 = master) to ``ip:port``."""

    cluster: str
    broker_name: str
    broker_addrs: dict[int, str]

    @property
    def master_addr(self) -> str | None:
        """Address of broker id 0: clients publish only to brokers that have one."""
        return self.broker_addrs.get(0)

    def to_json(self) -> dict[str, Any]:
        """The JSON object; ``brokerAddrs`` keys as quoted decimal strings, ascending."""
        addrs = {str(broker_id): self.broker_addrs[broker_id] for broker_id in sorted(self.broker_addrs)}
        return {"brokerAddrs": addrs, "brokerName": self.broker_name, "cluster": self.cluster}

    @classmethod
    def from_json(cls, value: object, path: str) -> Self:
        """Parse; quoted and fastjson's unquoted broker-id keys both work."""
        obj = as_object(value, path)
        addrs_path = f"{path}.brokerAddrs"
        addrs = as_object(obj.get("brokerAddrs") or {}, addrs_path)
        return cls(
            get_str(obj, "cluster", path, ""),
            get_str(obj, "brokerName", path),
            {broker_id_key(k, addrs_path): get_str(addrs, k, addrs_path) for k in addrs},
        )


@dataclass(frozen=True, slots=True)
class TopicRouteData:
    """Body of a SUCCESS answer to GET_ROUTEINFO_BY_TOPIC (105).

    ``order_topic_conf`` (``"broker:nums;…"``) replaces ``queueDatas`` for publishing in both
    clients, so it is left out unless set.
    """

    queue_datas: tuple[QueueData, ...] = ()
    broker_datas: tuple[BrokerData, ...] = ()
    filter_server_table: dict[str, tuple[str, ...]] = field(default_factory=dict)
    order_topic_conf: str | None = None

    def encode(self) -> bytes:
        """The body bytes (standard JSON, quoted broker-id keys)."""
        obj: dict[str, Any] = {
            "brokerDatas": [b.to_json() for b in self.broker_datas],
            "filterServerTable": {k: list(v) for k, v in self.filter_server_table.items()},
        }
        if self.order_topic_conf is not None:
            obj["orderTopicConf"] = self.order_topic_conf
        obj["queueDatas"] = [q.to_json() for q in self.queue_datas]
        return _encode(obj)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview | str) -> Self:
        """Parse a route body, e.g. a Java NameServer's ``{0:"ip:port"}`` form."""
        obj = as_object(loads(data, what="TopicRouteData"), "TopicRouteData")
        filters = as_object(obj.get("filterServerTable") or {}, "filterServerTable")
        queues = as_list(obj.get("queueDatas"), "queueDatas")
        brokers = as_list(obj.get("brokerDatas"), "brokerDatas")
        return cls(
            tuple(QueueData.from_json(q, f"queueDatas[{i}]") for i, q in enumerate(queues)),
            tuple(BrokerData.from_json(b, f"brokerDatas[{i}]") for i, b in enumerate(brokers)),
            {k: as_str_list(v, f"filterServerTable.{k}") for k, v in filters.items()},
            get_str(obj, "orderTopicConf", "TopicRouteData", None),
        )


# --- small bodies ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicList:
    """Body of GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206) and GET_TOPICS_BY_CLUSTER (224)."""

    topic_list: tuple[str, ...] = ()
    broker_addr: str | None = None

    def encode(self) -> bytes:
        """The body bytes; ``brokerAddr`` only when set."""
        obj: dict[str, Any] = {} if self.broker_addr is None else {"brokerAddr": self.broker_addr}
        obj["topicList"] = list(self.topic_list)
        return _encode(obj)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview | str) -> Self:
        """Parse the body."""
        obj = as_object(loads(data, what=cls.__name__), cls.__name__)
        return cls(as_str_list(obj.get("topicList"), "topicList"), get_str(obj, "brokerAddr", cls.__name__, None))


_MOVED = {  # name → its module now (Spark's per-query source runner needs routes and queues only)
    **dict.fromkeys(
        ("ConsumerListBody", "LockBatchRequestBody", "LockBatchResponseBody", "UnlockBatchRequestBody"), "group_bodies"
    ),
    "KVTable": "namesrv_bodies",
}


def __getattr__(name: str) -> object:
    # The moved names still resolve here, imported on first use.
    home = _MOVED.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__package__}.{home}"), name)


__all__ = [
    "BrokerData",
    "ConsumerListBody",
    "KVTable",
    "LockBatchRequestBody",
    "LockBatchResponseBody",
    "MessageQueue",
    "QueueData",
    "TopicList",
    "TopicRouteData",
    "UnlockBatchRequestBody",
    "broker_id_key",
]
