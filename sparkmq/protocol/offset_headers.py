"""The headers of a consumer's route and offset requests, apart from the other headers.

Spark's per-query source runner asks routes and offsets and nothing else; each header class costs
~0.5 ms of import (a frozen, slotted dataclass), so these few live here and ``headers`` /
``admin_headers`` re-export them under their usual names.

Example::

    >>> UpdateConsumerOffsetRequestHeader("CID", "T", 0, 42).to_fields()
    {'consumerGroup': 'CID', 'topic': 'T', 'queueId': '0', 'commitOffset': '42'}
"""

from __future__ import annotations

from dataclasses import dataclass

from .schema import CommandHeader, Int32, Int64


@dataclass(frozen=True, slots=True)
class GetRouteInfoRequestHeader(CommandHeader):
    """GET_ROUTEINFO_BY_TOPIC (105); ``acceptStandardJsonOnly`` is 4.9.x, never sent by old clients."""

    topic: str
    accept_standard_json_only: bool | None = None


@dataclass(frozen=True, slots=True)
class QueryConsumerOffsetRequestHeader(CommandHeader):
    """QUERY_CONSUMER_OFFSET (14)."""

    consumer_group: str
    topic: str
    queue_id: Int32


@dataclass(frozen=True, slots=True)
class UpdateConsumerOffsetRequestHeader(CommandHeader):
    """UPDATE_CONSUMER_OFFSET (15); ali-ons sends ``commitOffset`` -1 for unconsumed queues."""

    consumer_group: str
    topic: str
    queue_id: Int32
    commit_offset: Int64


@dataclass(frozen=True, slots=True)
class TopicQueueRequestHeader(CommandHeader):
    """GET_MAX_OFFSET (30), GET_MIN_OFFSET (31), GET_EARLIEST_MSG_STORETIME (32): topic + queue."""

    topic: str
    queue_id: Int32


@dataclass(frozen=True, slots=True)
class OffsetResponseHeader(CommandHeader):
    """``offset``: answer to 14, 29, 30 and 31."""

    offset: Int64


@dataclass(frozen=True, slots=True)
class SearchOffsetRequestHeader(CommandHeader):
    """SEARCH_OFFSET_BY_TIMESTAMP (29): ``timestamp`` in ms."""

    topic: str
    queue_id: Int32
    timestamp: Int64


@dataclass(frozen=True, slots=True)
class GetConsumeStatsRequestHeader(CommandHeader):
    """GET_CONSUME_STATS (208): a blank topic means every topic with an offset for the group."""

    consumer_group: str
    topic: str | None = None


__all__ = [
    "GetConsumeStatsRequestHeader",
    "GetRouteInfoRequestHeader",
    "OffsetResponseHeader",
    "QueryConsumerOffsetRequestHeader",
    "SearchOffsetRequestHeader",
    "TopicQueueRequestHeader",
    "UpdateConsumerOffsetRequestHeader",
]
