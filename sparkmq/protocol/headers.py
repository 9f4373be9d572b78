"""Typed custom headers of the client <-> broker commands (Java 4.9.7 ``protocol/header``).

Field types follow the Java classes: ``Int32`` = ``Integer``, ``Int64`` = ``Long``; fields
without a default are ``@CFNotNull``. Response headers are what the C++ client parses, so they
must go out through :meth:`~sparkmq.protocol.schema.CommandHeader.to_fields` (strings only:
C++ 1.2.3 reads a JSON number as 0).

Example::

    >>> ext = {"consumerGroup": "CID", "topic": "T", "queueId": 0, "commitOffset": -1}
    >>> from sparkmq.protocol.scalars import ext_value
    >>> UpdateConsumerOffsetRequestHeader.from_fields({k: ext_value(k, v) for k, v in ext.items()})
    UpdateConsumerOffsetRequestHeader(consumer_group='CID', topic='T', queue_id=0, commit_offset=-1)
    >>> PullMessageResponseHeader(0, 5, 0, 9).to_fields()
    {'suggestWhichBrokerId': '0', 'nextBeginOffset': '5', 'minOffset': '0', 'maxOffset': '9'}
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .client_headers import (  # re-exported: they live apart, for the clients (see client_headers)
    CheckTransactionStateRequestHeader,
    ConsumerGroupRequestHeader,
    GetConsumerConnectionListRequestHeader,
    GetConsumerListByGroupRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    NotifyConsumerIdsChangedRequestHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    ResetOffsetRequestHeader,
    UnregisterClientRequestHeader,
)
from .codes import RequestCode
from .offset_headers import (
    OffsetResponseHeader,
    QueryConsumerOffsetRequestHeader,
    SearchOffsetRequestHeader,
    TopicQueueRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from .scalars import parse_bool, parse_int
from .schema import CommandHeader, Int32, Int64, wire_key

# --- send ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SendMessageRequestHeader(CommandHeader):
    """SEND_MESSAGE (10) with long names; C++ 1.2.3 sends it for single and batch sends.

    ``batch`` arrives as ``"1"``/``"0"`` from C++ and is true for ``"1"`` or ``"true"``.
    """

    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: Int32
    queue_id: Int32
    sys_flag: Int32
    born_timestamp: Int64
    flag: Int32
    properties: str | None = None
    reconsume_times: Int32 | None = None
    unit_mode: bool = False
    batch: bool = False
    max_reconsume_times: Int32 | None = None
    bname: str | None = None  # RpcRequestHeader.bname (4.9.5+), broker name


@dataclass(frozen=True, slots=True)
class SendMessageRequestHeaderV2(CommandHeader):
    """SEND_MESSAGE_V2 (310) / SEND_BATCH_MESSAGE (320): the same fields under keys ``a``..``n``."""

    producer_group: str = wire_key("a")
    topic: str = wire_key("b")
    default_topic: str = wire_key("c")
    default_topic_queue_nums: Int32 = wire_key("d")
    queue_id: Int32 = wire_key("e")
    sys_flag: Int32 = wire_key("f")
    born_timestamp: Int64 = wire_key("g")
    flag: Int32 = wire_key("h")
    properties: str | None = wire_key("i", None)
    reconsume_times: Int32 | None = wire_key("j", None)
    unit_mode: bool = wire_key("k", False)
    max_reconsume_times: Int32 | None = wire_key("l", None)
    batch: bool = wire_key("m", False)
    bname: str | None = wire_key("n", None)

    def to_v1(self) -> SendMessageRequestHeader:
        """``createSendMessageRequestHeaderV1``: the same values with the long names."""
        return SendMessageRequestHeader(**_values(self))

    @classmethod
    def from_v1(cls, v1: SendMessageRequestHeader) -> SendMessageRequestHeaderV2:
        """``createSendMessageRequestHeaderV2``."""
        return cls(**_values(v1))


def _values(header: SendMessageRequestHeader | SendMessageRequestHeaderV2) -> dict[str, Any]:
    return {f.name: getattr(header, f.name) for f in dataclasses.fields(header)}


def parse_send_request_header(code: int, ext_fields: Mapping[str, str]) -> SendMessageRequestHeader:
    """Decode the header of any send code into the V1 form, as Java's ``parseRequestHeader``.

    >>> parse_send_request_header(310, {"a": "P", "b": "T", "c": "TBW102", "d": "4", "e": "3",
    ...                                 "f": "0", "g": "1", "h": "0", "k": "false"}).queue_id
    3
    """
    if code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        try:
            return _v2_as_v1(ext_fields)
        except KeyError:  # a required field is missing: the schema names it
            return SendMessageRequestHeaderV2.from_fields(ext_fields).to_v1()
    return SendMessageRequestHeader.from_fields(ext_fields)


def _v2_as_v1(f: Mapping[str, str]) -> SendMessageRequestHeader:
    """``from_fields(...).to_v1()`` of SendMessageRequestHeaderV2 unrolled (the hot path of every
    send): the same checks in the same order, the same errors; plain values skip the regex."""
    group, topic, default_topic = f["a"], f["b"], f["c"]
    queue_nums, queue_id, sys_flag, born, flag = f["d"], f["e"], f["f"], f["g"], f["h"]
    get = f.get
    reconsume, unit_mode, max_reconsume, batch = get("j"), get("k"), get("l"), get("m")
    return SendMessageRequestHeader(
        group,
        topic,
        default_topic,
        _int(queue_nums, "d", 9),
        _int(queue_id, "e", 9),
        _int(sys_flag, "f", 9),
        _int(born, "g", 18),
        _int(flag, "h", 9),
        get("i"),
        None if reconsume is None else _int(reconsume, "j", 9),
        False if unit_mode is None or unit_mode == "false" else parse_bool(unit_mode, "k"),
        max_reconsume_times=None if max_reconsume is None else _int(max_reconsume, "l", 9),  # "l" is checked before "m"
        batch=False if batch is None or batch == "false" else parse_bool(batch, "m"),
        bname=get("n"),
    )


def _int(raw: str, key: str, digits: int) -> int:
    """``parse_int``; up to ``digits`` ASCII digits (always in range) take the short way."""
    if len(raw) <= digits and raw.isdigit() and raw.isascii():
        return int(raw)
    return parse_int(raw, key, bits=32 if digits == 9 else 64)


@dataclass(frozen=True, slots=True)
class SendMessageResponseHeader(CommandHeader):
    """Answer to a send; C++ 1.2.3 crashes if it is missing and reads only string values.

    ``MSG_REGION`` / ``TRACE_ON`` are not in Java's class but the Java broker adds them.
    """

    msg_id: str
    queue_id: Int32
    queue_offset: Int64
    transaction_id: str | None = None
    msg_region: str | None = wire_key("MSG_REGION", None)
    trace_on: bool | None = wire_key("TRACE_ON", None)


def send_response_fields(
    msg_id: str, queue_id: int, queue_offset: int, msg_region: str | None, trace_on: bool | None
) -> dict[str, str]:
    """``SendMessageResponseHeader(msg_id, queue_id, queue_offset, None, msg_region, trace_on).to_fields()``
    without building the header (every single send answers with it).

    >>> send_response_fields("ID", 1, 5, "R", True)
    {'msgId': 'ID', 'queueId': '1', 'queueOffset': '5', 'MSG_REGION': 'R', 'TRACE_ON': 'true'}
    """
    if msg_region is None or trace_on is None:
        return SendMessageResponseHeader(msg_id, queue_id, queue_offset, None, msg_region, trace_on).to_fields()
    return {
        "msgId": msg_id,
        "queueId": str(queue_id),
        "queueOffset": str(queue_offset),
        "MSG_REGION": msg_region,
        "TRACE_ON": "true" if trace_on else "false",
    }


# --- pull and offsets ------------------------------------------------------------------------


GetMaxOffsetRequestHeader = TopicQueueRequestHeader
GetMinOffsetRequestHeader = TopicQueueRequestHeader
GetEarliestMsgStoretimeRequestHeader = TopicQueueRequestHeader


QueryConsumerOffsetResponseHeader = OffsetResponseHeader
GetMaxOffsetResponseHeader = OffsetResponseHeader
GetMinOffsetResponseHeader = OffsetResponseHeader
SearchOffsetResponseHeader = OffsetResponseHeader


@dataclass(frozen=True, slots=True)
class GetEarliestMsgStoretimeResponseHeader(CommandHeader):
    """Store time of the message at the queue's min offset."""

    timestamp: Int64


# --- message lookup --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ViewMessageRequestHeader(CommandHeader):
    """VIEW_MESSAGE_BY_ID (33): the CommitLog physical offset taken from an offset msgId."""

    offset: Int64


@dataclass(frozen=True, slots=True)
class QueryMessageRequestHeader(CommandHeader):
    """QUERY_MESSAGE (12); an extra ``_UNIQUE_KEY_QUERY`` of "true" means look up by UNIQ_KEY."""

    topic: str
    key: str
    max_num: Int32
    begin_timestamp: Int64
    end_timestamp: Int64
    unique_key_query: bool | None = wire_key("_UNIQUE_KEY_QUERY", None)


@dataclass(frozen=True, slots=True)
class QueryMessageResponseHeader(CommandHeader):
    """Answer to QUERY_MESSAGE (the body holds the raw messages)."""

    index_last_update_timestamp: Int64
    index_last_update_phyoffset: Int64


# --- consumer and client management ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConsumerSendMsgBackRequestHeader(CommandHeader):
    """CONSUMER_SEND_MSG_BACK (36); C++ 1.2.3 sends only offset, group and delayLevel."""

    offset: Int64
    group: str
    delay_level: Int32
    origin_msg_id: str | None = None
    origin_topic: str | None = None
    unit_mode: bool = False
    max_reconsume_times: Int32 | None = None


# --- transactions ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EndTransactionRequestHeader(CommandHeader):
    """END_TRANSACTION (37): ``commitOrRollback`` 0 / 8 (commit) / 12 (rollback)."""

    producer_group: str
    tran_state_table_offset: Int64
    commit_log_offset: Int64
    commit_or_rollback: Int32
    msg_id: str
    from_transaction_check: bool | None = None
    transaction_id: str | None = None


__all__ = [
    "CheckTransactionStateRequestHeader",
    "ConsumerGroupRequestHeader",
    "ConsumerSendMsgBackRequestHeader",
    "EndTransactionRequestHeader",
    "GetConsumerConnectionListRequestHeader",
    "GetConsumerListByGroupRequestHeader",
    "GetConsumerRunningInfoRequestHeader",
    "GetEarliestMsgStoretimeRequestHeader",
    "GetEarliestMsgStoretimeResponseHeader",
    "GetMaxOffsetRequestHeader",
    "GetMaxOffsetResponseHeader",
    "GetMinOffsetRequestHeader",
    "GetMinOffsetResponseHeader",
    "NotifyConsumerIdsChangedRequestHeader",
    "OffsetResponseHeader",
    "PullMessageRequestHeader",
    "PullMessageResponseHeader",
    "QueryConsumerOffsetRequestHeader",
    "QueryConsumerOffsetResponseHeader",
    "QueryMessageRequestHeader",
    "QueryMessageResponseHeader",
    "ResetOffsetRequestHeader",
    "SearchOffsetRequestHeader",
    "SearchOffsetResponseHeader",
    "SendMessageRequestHeader",
    "SendMessageRequestHeaderV2",
    "SendMessageResponseHeader",
    "TopicQueueRequestHeader",
    "UnregisterClientRequestHeader",
    "UpdateConsumerOffsetRequestHeader",
    "ViewMessageRequestHeader",
    "parse_send_request_header",
]
