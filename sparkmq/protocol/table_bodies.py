"""The body of SPARKMQ_TABLE_STATUS (40001): a topic's Delta table against its queues (docs/tables.md).

>>> body = TableStatusBody("T", "/t/T", "ok", "", 3, (TableQueueStatus(0, 5, 0, 7, 1.5),))
>>> TableStatusBody.decode(body.encode()) == body
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Self

from .fastjson import as_list, as_object, dumps, get_float, get_int, get_str, loads


@dataclass(frozen=True, slots=True)
class TableQueueStatus:
    """One queue: the table's next offset (-1: not known) against the queue's, and the lag in seconds."""

    queue_id: int
    table_offset: int
    min_offset: int
    max_offset: int
    lag_seconds: float

    @property
    def lag_messages(self) -> int:
        return max(self.max_offset - max(self.table_offset, self.min_offset), 0)

    def to_json(self) -> dict[str, Any]:
        return {
            "lagMessages": self.lag_messages,
            "lagSeconds": self.lag_seconds,
            "maxOffset": self.max_offset,
            "minOffset": self.min_offset,
            "queueId": self.queue_id,
            "tableOffset": self.table_offset,
        }

    @classmethod
    def from_json(cls, value: object, path: str) -> Self:
        obj = as_object(value, path)
        return cls(
            get_int(obj, "queueId", path),
            get_int(obj, "tableOffset", path),
            get_int(obj, "minOffset", path),
            get_int(obj, "maxOffset", path),
            get_float(obj, "lagSeconds", path, 0.0),
        )


@dataclass(frozen=True, slots=True)
class TableStatusBody:
    """A topic's table: where it is, ``state`` ok | stalled | starting, why it stalled, its Delta version."""

    topic: str
    uri: str
    state: str
    reason: str
    table_version: int
    queues: tuple[TableQueueStatus, ...] = ()

    def encode(self) -> bytes:
        return dumps(
            {
                "queues": [q.to_json() for q in self.queues],
                "reason": self.reason,
                "state": self.state,
                "tableVersion": self.table_version,
                "topic": self.topic,
                "uri": self.uri,
            }
        ).encode("utf-8")

    @classmethod
    def decode(cls, data: bytes) -> Self:
        what = cls.__name__
        obj = as_object(loads(data, what=what), what)
        queues = as_list(obj.get("queues") or [], f"{what}.queues")
        return cls(
            get_str(obj, "topic", what),
            get_str(obj, "uri", what),
            get_str(obj, "state", what),
            get_str(obj, "reason", what, ""),
            get_int(obj, "tableVersion", what, -1),
            tuple(TableQueueStatus.from_json(q, f"{what}.queues[{i}]") for i, q in enumerate(queues)),
        )
