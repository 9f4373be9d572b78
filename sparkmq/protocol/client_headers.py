"""The headers a client instance reads and writes besides the offsets: pulls, group membership and
the broker's requests to a client (check a transaction, running info, reset offsets).

Apart from :mod:`~sparkmq.protocol.headers` (which re-exports them under their usual names):
Spark's Python workers read through the pull consumer, and every header class they do not need
is ~50 objects that the ``gc.collect()`` a reused worker runs after each task walks, and ~0.5 ms
of import (a frozen, slotted dataclass).

Example::

    >>> PullMessageResponseHeader(0, 5, 0, 9).to_fields()
    {'suggestWhichBrokerId': '0', 'nextBeginOffset': '5', 'minOffset': '0', 'maxOffset': '9'}
"""

from __future__ import annotations

from dataclasses import dataclass

from .schema import CommandHeader, Int32, Int64, wire_key

# --- pull ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PullMessageRequestHeader(CommandHeader):
    """PULL_MESSAGE (11); ``sys_flag`` holds :class:`~sparkmq.protocol.codes.PullSysFlag` bits."""

    consumer_group: str
    topic: str
    queue_id: Int32
    queue_offset: Int64
    max_msg_nums: Int32
    sys_flag: Int32
    commit_offset: Int64
    suspend_timeout_millis: Int64
    sub_version: Int64
    subscription: str | None = None
    expression_type: str | None = None


@dataclass(frozen=True, slots=True)
class PullMessageResponseHeader(CommandHeader):
    """All four fields are required by both clients, as strings."""

    suggest_which_broker_id: Int64
    next_begin_offset: Int64
    min_offset: Int64
    max_offset: Int64


# --- consumer and client management ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConsumerGroupRequestHeader(CommandHeader):
    """GET_CONSUMER_LIST_BY_GROUP (38), NOTIFY_CONSUMER_IDS_CHANGED (40), 203: ``consumerGroup``."""

    consumer_group: str


GetConsumerListByGroupRequestHeader = ConsumerGroupRequestHeader
NotifyConsumerIdsChangedRequestHeader = ConsumerGroupRequestHeader
GetConsumerConnectionListRequestHeader = ConsumerGroupRequestHeader


@dataclass(frozen=True, slots=True)
class UnregisterClientRequestHeader(CommandHeader):
    """UNREGISTER_CLIENT (35); C++ sends ``""`` for the group it is not unregistering."""

    client_id: str = wire_key("clientID")
    producer_group: str | None = None
    consumer_group: str | None = None


@dataclass(frozen=True, slots=True)
class CheckTransactionStateRequestHeader(CommandHeader):
    """CHECK_TRANSACTION_STATE (39), broker -> producer."""

    tran_state_table_offset: Int64
    commit_log_offset: Int64
    msg_id: str | None = None
    transaction_id: str | None = None
    offset_msg_id: str | None = None


# --- broker -> client ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GetConsumerRunningInfoRequestHeader(CommandHeader):
    """GET_CONSUMER_RUNNING_INFO (307), broker -> consumer."""

    consumer_group: str
    client_id: str
    jstack_enable: bool = False


@dataclass(frozen=True, slots=True)
class ResetOffsetRequestHeader(CommandHeader):
    """RESET_CONSUMER_CLIENT_OFFSET (220); C++ ``atoi``s ``isForce``, so "true" reads as false."""

    topic: str
    group: str
    timestamp: Int64
    is_force: bool


__all__ = [
    "CheckTransactionStateRequestHeader",
    "ConsumerGroupRequestHeader",
    "GetConsumerConnectionListRequestHeader",
    "GetConsumerListByGroupRequestHeader",
    "GetConsumerRunningInfoRequestHeader",
    "NotifyConsumerIdsChangedRequestHeader",
    "PullMessageRequestHeader",
    "PullMessageResponseHeader",
    "ResetOffsetRequestHeader",
    "UnregisterClientRequestHeader",
]
