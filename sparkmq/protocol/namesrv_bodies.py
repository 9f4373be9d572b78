"""JSON bodies of broker registration, cluster listing and KV tables (NameServer side).

REGISTER_BROKER (103) bodies come plain or, with header ``compressed=true``, as a zlib stream;
inflating is bounded so a small body cannot expand without limit.

Example::

    >>> body = RegisterBrokerBody(TopicConfigSerializeWrapper({"T": TopicConfig("T", 4, 4)}, DataVersion(1, 3)))
    >>> back = RegisterBrokerBody.decode(body.encode(compressed=True), compressed=True)
    >>> back.topic_config_serialize_wrapper.data_version
    DataVersion(timestamp=1, counter=3)
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from typing import Any, Self

from sparkmq.errors import InvalidFieldError

from .bodies import BrokerData
from .codes import MAX_FRAME_BYTES
from .fastjson import as_object, as_str_list, dumps, get_bool, get_int, get_str, loads

_INT32 = struct.Struct(">i")
_Data = bytes | bytearray | memoryview | str


def _load(data: _Data, what: str) -> dict[str, Any]:
    return as_object(loads(data, what=what), what)


@dataclass(frozen=True, slots=True)
class DataVersion:
    """``{"counter":n,"timestamp":ms}``: bumped whenever a broker's topic table changes."""

    timestamp: int = 0
    counter: int = 0

    def to_json(self) -> dict[str, Any]:
        """The JSON object."""
        return {"counter": self.counter, "timestamp": self.timestamp}

    @classmethod
    def from_json(cls, value: object, path: str) -> Self:
        """Parse the object at ``path``."""
        obj = as_object(value, path)
        return cls(get_int(obj, "timestamp", path, 0), get_int(obj, "counter", path, 0))


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """A topic as a broker holds it (Java defaults: 16 read/write queues, perm 6, SINGLE_TAG)."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = 6
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    attributes: tuple[tuple[str, str], ...] = ()  # RocketMQ 5's attributes, sorted by key

    @property
    def attribute_map(self) -> dict[str, str]:
        return dict(self.attributes)

    def to_json(self) -> dict[str, Any]:
        """The JSON object (fastjson key order; ``attributes`` only when there are some, as 4.x has none)."""
        head = {"attributes": dict(self.attributes)} if self.attributes else {}
        return head | {
            "order": self.order,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicFilterType": self.topic_filter_type,
            "topicName": self.topic_name,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_json(cls, value: object, path: str) -> Self:
        """Parse the object at ``path``."""
        obj = as_object(value, path)
        return cls(
            get_str(obj, "topicName", path),
            get_int(obj, "readQueueNums", path, 16),
            get_int(obj, "writeQueueNums", path, 16),
            get_int(obj, "perm", path, 6),
            get_str(obj, "topicFilterType", path, "SINGLE_TAG"),
            get_int(obj, "topicSysFlag", path, 0),
            get_bool(obj, "order", path, False),
            _attributes(obj.get("attributes"), f"{path}.attributes"),
        )

    def encode_compact(self) -> str:
        """``TopicConfig.encode()`` of Java 4.9.7: ``"name read write perm filterType"``.

        Java 4.9.7 writes and reads exactly these five fields; sysFlag and order are not sent.
        """
        return f"{self.topic_name} {self.read_queue_nums} {self.write_queue_nums} {self.perm} {self.topic_filter_type}"

    @classmethod
    def decode_compact(cls, text: str) -> Self:
        """Inverse of :meth:`encode_compact` (5.x appends attributes JSON: ignored)."""
        parts = text.split(" ", 5)
        try:
            return cls(parts[0], int(parts[1]), int(parts[2]), int(parts[3]), parts[4])
        except (IndexError, ValueError) as exc:
            raise InvalidFieldError(f"compact TopicConfig {text[:60]!r} is malformed", field="topicConfig") from exc


def _attributes(value: object, path: str) -> tuple[tuple[str, str], ...]:
    obj = as_object(value or {}, path)
    if not all(isinstance(v, str) for v in obj.values()):
        raise InvalidFieldError(f"{path} holds a value that is not a string", field="attributes")
    return tuple(sorted(obj.items()))


@dataclass(frozen=True, slots=True)
class TopicConfigSerializeWrapper:
    """``{"dataVersion":{…},"topicConfigTable":{name: TopicConfig}}`` (also topics.json)."""

    topic_config_table: dict[str, TopicConfig] = field(default_factory=dict)
    data_version: DataVersion = DataVersion()

    def to_json(self) -> dict[str, Any]:
        """The JSON object."""
        table = {name: self.topic_config_table[name].to_json() for name in sorted(self.topic_config_table)}
        return {"dataVersion": self.data_version.to_json(), "topicConfigTable": table}

    @classmethod
    def from_json(cls, value: object, path: str) -> Self:
        """Parse the object at ``path``."""
        obj = as_object(value, path)
        table = as_object(obj.get("topicConfigTable") or {}, f"{path}.topicConfigTable")
        configs = {k: TopicConfig.from_json(v, f"{path}.topicConfigTable.{k}") for k, v in table.items()}
        return cls(configs, DataVersion.from_json(obj.get("dataVersion") or {}, f"{path}.dataVersion"))

    def encode(self) -> bytes:
        """Standalone body bytes (pre-V3_0_11 REGISTER_BROKER, GET_ALL_TOPIC_CONFIG)."""
        return dumps(self.to_json()).encode("utf-8")

    @classmethod
    def decode(cls, data: _Data) -> Self:
        """Parse standalone body bytes."""
        return cls.from_json(_load(data, cls.__name__), cls.__name__)


@dataclass(frozen=True, slots=True)
class RegisterBrokerBody:
    """Body of REGISTER_BROKER (103), plain JSON or (``compressed=true``) zlib.

    The compressed stream is ``int32 len + DataVersion JSON``, ``int32 topicCount``, per topic
    ``int32 len + TopicConfig.encode_compact()``, ``int32 len + filterServerList JSON``.
    """

    topic_config_serialize_wrapper: TopicConfigSerializeWrapper = field(default_factory=TopicConfigSerializeWrapper)
    filter_server_list: tuple[str, ...] = ()

    def encode(self, *, compressed: bool = False) -> bytes:
        """The body bytes; ``compressed`` uses the zlib form (Deflater BEST_COMPRESSION)."""
        wrapper = self.topic_config_serialize_wrapper
        if not compressed:
            obj = {"filterServerList": list(self.filter_server_list), "topicConfigSerializeWrapper": wrapper.to_json()}
            return dumps(obj).encode("utf-8")
        chunks = [_sized(dumps(wrapper.data_version.to_json())), _INT32.pack(len(wrapper.topic_config_table))]
        chunks += [_sized(config.encode_compact()) for config in wrapper.topic_config_table.values()]
        chunks.append(_sized(dumps(list(self.filter_server_list))))
        return zlib.compress(b"".join(chunks), 9)

    @classmethod
    def decode(cls, data: bytes, *, compressed: bool = False, max_bytes: int = MAX_FRAME_BYTES) -> Self:
        """Parse either form; inflating stops at ``max_bytes`` (no zip bombs)."""
        if not compressed:
            obj = _load(data, cls.__name__)
            wrapper = TopicConfigSerializeWrapper.from_json(
                obj.get("topicConfigSerializeWrapper") or {}, "topicConfigSerializeWrapper"
            )
            return cls(wrapper, as_str_list(obj.get("filterServerList"), "filterServerList"))
        reader = _Inflated(data, max_bytes)
        version = DataVersion.from_json(loads(reader.sized(), what="dataVersion"), "dataVersion")
        configs = [TopicConfig.decode_compact(reader.sized().decode("utf-8", "replace")) for _ in range(reader.count())]
        servers = as_str_list(loads(reader.sized(), what="filterServerList"), "filterServerList")
        table = {c.topic_name: c for c in configs}
        return cls(TopicConfigSerializeWrapper(table, version), servers)


def _sized(text: str) -> bytes:
    raw = text.encode("utf-8")
    return _INT32.pack(len(raw)) + raw


class _Inflated:
    """Reads int32-length-prefixed chunks from a bounded zlib inflation."""

    def __init__(self, data: bytes, max_bytes: int) -> None:
        inflater = zlib.decompressobj()
        try:
            self._raw = inflater.decompress(data, max_bytes)
        except zlib.error as exc:
            raise InvalidFieldError(f"compressed RegisterBrokerBody is not zlib: {exc}", field="body") from exc
        if inflater.unconsumed_tail:
            raise InvalidFieldError(f"compressed RegisterBrokerBody inflates past {max_bytes} bytes", field="body")
        self._position = 0

    def count(self) -> int:
        if self._position + 4 > len(self._raw):
            raise InvalidFieldError("compressed RegisterBrokerBody is truncated", field="body")
        (value,) = _INT32.unpack_from(self._raw, self._position)
        self._position += 4
        if value < 0:
            raise InvalidFieldError(f"compressed RegisterBrokerBody has a negative length {value}", field="body")
        return int(value)

    def sized(self) -> bytes:
        length = self.count()
        end = self._position + length
        if end > len(self._raw):
            raise InvalidFieldError("compressed RegisterBrokerBody is truncated", field="body")
        chunk, self._position = self._raw[self._position : end], end
        return chunk


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """Body of GET_BROKER_CLUSTER_INFO (106)."""

    broker_addr_table: dict[str, BrokerData] = field(default_factory=dict)
    cluster_addr_table: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def encode(self) -> bytes:
        """The body bytes (quoted broker-id keys)."""
        brokers = self.broker_addr_table
        obj = {
            "brokerAddrTable": {name: brokers[name].to_json() for name in sorted(brokers)},
            "clusterAddrTable": {name: sorted(members) for name, members in sorted(self.cluster_addr_table.items())},
        }
        return dumps(obj).encode("utf-8")

    @classmethod
    def decode(cls, data: _Data) -> Self:
        """Parse the body (fastjson's unquoted broker-id keys too)."""
        obj = _load(data, cls.__name__)
        brokers = as_object(obj.get("brokerAddrTable") or {}, "brokerAddrTable")
        clusters = as_object(obj.get("clusterAddrTable") or {}, "clusterAddrTable")
        return cls(
            {k: BrokerData.from_json(v, f"brokerAddrTable.{k}") for k, v in brokers.items()},
            {k: as_str_list(v, f"clusterAddrTable.{k}") for k, v in clusters.items()},
        )


@dataclass(frozen=True, slots=True)
class KVTable:
    """``{"table":{…}}``: REGISTER_BROKER's answer (ORDER_TOPIC_CONFIG) and KV listings."""

    table: dict[str, str] = field(default_factory=dict)

    def encode(self) -> bytes:
        """The body bytes."""
        return dumps({"table": self.table}).encode("utf-8")

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview | str) -> Self:
        """Parse the body."""
        obj = as_object(loads(data, what=cls.__name__), cls.__name__)
        table = as_object(obj.get("table") or {}, "table")
        return cls({k: get_str(table, k, "table") for k in table})


__all__ = [
    "ClusterInfo",
    "DataVersion",
    "KVTable",
    "RegisterBrokerBody",
    "TopicConfig",
    "TopicConfigSerializeWrapper",
]
