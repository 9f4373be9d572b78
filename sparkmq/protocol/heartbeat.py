"""HEART_BEAT (34) body: who a client is, and its producer and consumer groups.

Decoding accepts all three dialects: C++ 1.2.3 (enums as ordinals, ``subVersion`` as a string,
empty sets and ``unitMode`` left out, a trailing newline), ali-ons (enum names, numeric
``subVersion``, ``tagsSet``/``codeSet`` present) and Java. Encoding writes Java's form.

Example::

    >>> body = (b'{"clientID":"18945-127.0.0.1@DEFAULT","consumerDataSet":[{"consumeFromWhere":0,'
    ...         b'"consumeType":1,"groupName":"CID","messageModel":1,"subscriptionDataSet":'
    ...         b'[{"subString":"*","subVersion":"17","topic":"T"}]}]}\\n')
    >>> consumer = HeartbeatData.decode(body).consumer_data_set[0]
    >>> consumer.message_model.name, consumer.subscription_data_set[0].sub_version
    ('CLUSTERING', 17)
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Self

from .fastjson import as_int, as_list, as_object, as_str_list, dumps, get_bool, get_enum, get_int, get_str, loads


class ConsumeType(IntEnum):
    """``ConsumeType``: C++ sends the ordinal, Java and ali-ons the name."""

    CONSUME_ACTIVELY = 0  # pull consumer
    CONSUME_PASSIVELY = 1  # push consumer


class MessageModel(IntEnum):
    """``MessageModel``."""

    BROADCASTING = 0
    CLUSTERING = 1


class ConsumeFromWhere(IntEnum):
    """``ConsumeFromWhere`` (ordinals 1-3 are deprecated in Java but still valid)."""

    CONSUME_FROM_LAST_OFFSET = 0
    CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST = 1
    CONSUME_FROM_MIN_OFFSET = 2
    CONSUME_FROM_MAX_OFFSET = 3
    CONSUME_FROM_FIRST_OFFSET = 4
    CONSUME_FROM_TIMESTAMP = 5


@dataclass(frozen=True, slots=True)
class SubscriptionData:
    """One subscription. ``code_set`` is what the client sent: C++ 1.2.3 puts ``atoi(tag)`` there,
    not tag hash codes, so never filter with it; recompute hashes from ``tags_set``."""

    topic: str
    sub_string: str
    tags_set: tuple[str, ...] = ()
    code_set: tuple[int, ...] = ()
    sub_version: int = 0
    class_filter_mode: bool = False
    expression_type: str = "TAG"

    def to_json(self) -> dict[str, Any]:
        """The JSON object as Java writes it (every field, fastjson key order)."""
        return {
            "classFilterMode": self.class_filter_mode,
            "codeSet": list(self.code_set),
            "expressionType": self.expression_type,
            "subString": self.sub_string,
            "subVersion": self.sub_version,
            "tagsSet": list(self.tags_set),
            "topic": self.topic,
        }

    @classmethod
    def from_json(cls, value: object, path: str) -> Self:
        """Parse a C++ (string ``subVersion``, no empty sets) or Java/ali-ons subscription."""
        obj = as_object(value, path)
        codes = as_list(obj.get("codeSet"), f"{path}.codeSet")
        return cls(
            get_str(obj, "topic", path),
            get_str(obj, "subString", path, "*"),
            as_str_list(obj.get("tagsSet"), f"{path}.tagsSet"),
            tuple(as_int(c, f"{path}.codeSet[{i}]") for i, c in enumerate(codes)),
            get_int(obj, "subVersion", path, 0),
            get_bool(obj, "classFilterMode", path, False),
            get_str(obj, "expressionType", path, None) or "TAG",
        )


@dataclass(frozen=True, slots=True)
class ConsumerData:
    """One consumer group of a heartbeat."""

    group_name: str
    consume_type: ConsumeType
    message_model: MessageModel
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    subscription_data_set: tuple[SubscriptionData, ...] = ()
    unit_mode: bool = False

    def to_json(self) -> dict[str, Any]:
        """The JSON object; enums by name, as Java writes them."""
        return {
            "consumeFromWhere": self.consume_from_where.name,
            "consumeType": self.consume_type.name,
            "groupName": self.group_name,
            "messageModel": self.message_model.name,
            "subscriptionDataSet": [s.to_json() for s in self.subscription_data_set],
            "unitMode": self.unit_mode,
        }

    @classmethod
    def from_json(cls, value: object, path: str) -> Self:
        """Parse; enums as ordinals (C++) or names (Java, ali-ons)."""
        obj = as_object(value, path)
        subs = as_list(obj.get("subscriptionDataSet"), f"{path}.subscriptionDataSet")
        return cls(
            get_str(obj, "groupName", path),
            get_enum(obj, "consumeType", path, ConsumeType),
            get_enum(obj, "messageModel", path, MessageModel),
            get_enum(obj, "consumeFromWhere", path, ConsumeFromWhere, ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET),
            tuple(SubscriptionData.from_json(s, f"{path}.subscriptionDataSet[{i}]") for i, s in enumerate(subs)),
            get_bool(obj, "unitMode", path, False),
        )


@dataclass(frozen=True, slots=True)
class ProducerData:
    """One producer group of a heartbeat."""

    group_name: str


@dataclass(frozen=True, slots=True)
class HeartbeatData:
    """Body of HEART_BEAT (34); C++ leaves out empty producer/consumer sets."""

    client_id: str
    producer_data_set: tuple[ProducerData, ...] = ()
    consumer_data_set: tuple[ConsumerData, ...] = ()

    def encode(self) -> bytes:
        """The body as a Java client writes it."""
        obj = {
            "clientID": self.client_id,
            "consumerDataSet": [c.to_json() for c in self.consumer_data_set],
            "producerDataSet": [{"groupName": p.group_name} for p in self.producer_data_set],
        }
        return dumps(obj).encode("utf-8")

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview | str) -> Self:
        """Parse a heartbeat from C++ 1.2.3, ali-ons or Java."""
        obj = as_object(loads(data, what="HeartbeatData"), "HeartbeatData")
        producers = as_list(obj.get("producerDataSet"), "producerDataSet")
        consumers = as_list(obj.get("consumerDataSet"), "consumerDataSet")
        return cls(
            get_str(obj, "clientID", "HeartbeatData"),
            tuple(
                ProducerData(get_str(as_object(p, f"producerDataSet[{i}]"), "groupName", f"producerDataSet[{i}]"))
                for i, p in enumerate(producers)
            ),
            tuple(ConsumerData.from_json(c, f"consumerDataSet[{i}]") for i, c in enumerate(consumers)),
        )


@dataclass(frozen=True, slots=True)
class CheckClientRequestBody:
    """Body of CHECK_CLIENT_CONFIG (46): a Java consumer asks whether the broker can serve a
    subscription (sent on start for SQL92 subscriptions).

    >>> body = CheckClientRequestBody("c1", "G", SubscriptionData("T", "a > 1", expression_type="SQL92"))
    >>> CheckClientRequestBody.decode(body.encode()).subscription_data.sub_string
    'a > 1'
    """

    client_id: str
    group: str
    subscription_data: SubscriptionData | None

    def encode(self) -> bytes:
        obj: dict[str, Any] = {"clientId": self.client_id, "group": self.group}
        if self.subscription_data is not None:
            obj["subscriptionData"] = self.subscription_data.to_json()
        return dumps(obj).encode("utf-8")

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview | str) -> Self:
        obj = as_object(loads(data, what="CheckClientRequestBody"), "CheckClientRequestBody")
        sub = obj.get("subscriptionData")
        return cls(
            get_str(obj, "clientId", "CheckClientRequestBody", ""),
            get_str(obj, "group", "CheckClientRequestBody", ""),
            None if sub is None else SubscriptionData.from_json(sub, "subscriptionData"),
        )


__all__ = [
    "CheckClientRequestBody",
    "ConsumeFromWhere",
    "ConsumeType",
    "ConsumerData",
    "HeartbeatData",
    "MessageModel",
    "ProducerData",
    "SubscriptionData",
]
