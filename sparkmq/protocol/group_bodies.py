"""JSON bodies of a consumer group's coordination: its member list and its queue locks.

Apart from :mod:`~sparkmq.protocol.bodies` (routes and queues), which Spark's per-query source
runner imports: it neither lists a group's members nor locks queues.

Example::

    >>> LockBatchResponseBody((MessageQueue("T", "broker-a", 0),)).encode()
    b'{"lockOKMQSet":[{"brokerName":"broker-a","queueId":0,"topic":"T"}]}'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Self

from .bodies import MessageQueue
from .fastjson import as_list, as_object, as_str_list, dumps, get_str, loads


def _encode(obj: object) -> bytes:
    return dumps(obj).encode("utf-8")


def _queues(value: object, path: str) -> tuple[MessageQueue, ...]:
    return tuple(MessageQueue.from_json(item, f"{path}[{i}]") for i, item in enumerate(as_list(value, path)))


@dataclass(frozen=True, slots=True)
class LockBatchRequestBody:
    """Body of LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42); C++ leaves out an empty ``mqSet``."""

    consumer_group: str
    client_id: str
    mq_set: tuple[MessageQueue, ...] = ()

    def encode(self) -> bytes:
        """The body bytes."""
        mqs = [q.to_json() for q in self.mq_set]
        return _encode({"clientId": self.client_id, "consumerGroup": self.consumer_group, "mqSet": mqs})

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview | str) -> Self:
        """Parse the body."""
        path = cls.__name__
        obj = as_object(loads(data, what=path), path)
        group, client = get_str(obj, "consumerGroup", path), get_str(obj, "clientId", path)
        return cls(group, client, _queues(obj.get("mqSet"), "mqSet"))


UnlockBatchRequestBody = LockBatchRequestBody


@dataclass(frozen=True, slots=True)
class LockBatchResponseBody:
    """Answer to LOCK_BATCH_MQ: the queues now held by the requesting client."""

    lock_ok_mq_set: tuple[MessageQueue, ...] = ()

    def encode(self) -> bytes:
        """The body bytes."""
        return _encode({"lockOKMQSet": [q.to_json() for q in self.lock_ok_mq_set]})

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview | str) -> Self:
        """Parse the body."""
        obj = as_object(loads(data, what=cls.__name__), cls.__name__)
        return cls(_queues(obj.get("lockOKMQSet"), "lockOKMQSet"))


@dataclass(frozen=True, slots=True)
class ConsumerListBody:
    """``GetConsumerListByGroupResponseBody``: C++ throws on SUCCESS with an empty body."""

    consumer_id_list: tuple[str, ...] = ()

    def encode(self) -> bytes:
        """The body bytes."""
        return _encode({"consumerIdList": list(self.consumer_id_list)})

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview | str) -> Self:
        """Parse the body."""
        obj = as_object(loads(data, what=cls.__name__), cls.__name__)
        return cls(as_str_list(obj.get("consumerIdList"), "consumerIdList"))


__all__ = ["ConsumerListBody", "LockBatchRequestBody", "LockBatchResponseBody", "UnlockBatchRequestBody"]
