"""Message trace records in RocketMQ's ``TraceDataEncoder`` text format (pure functions, no I/O).

A trace message's body is records ended by ``\\x02``, each of fields separated by ``\\x01``; its keys
are the traced message ids and their message keys, so the broker's index finds a message's traces.
The four record types, field by field (Java's ``encoderFromContextBean``)::

    Pub             type ts region group topic msgId tags keys storeHost bodyLength costMs msgType offsetMsgId success
    SubBefore       type ts region group requestId msgId retryTimes keys               (one record per message)
    SubAfter        type requestId msgId costMs success keys contextCode ts group     (one record per message)
    EndTransaction  type ts region group topic msgId tags keys storeHost msgType transactionId state fromCheck

An absent tag or key list is written ``null``, as Java's ``StringBuilder.append(null)`` does.

>>> ctx = TraceContext(TraceType.PUB, 1700000000000, "DefaultRegion", "PID_a",
...                    beans=(TraceBean(topic="orders", msg_id="ID1", keys="k1 k2", msg_type=0),))
>>> data, keys = encode(ctx)
>>> data.split("\\x01")[:6], sorted(keys)
(['Pub', '1700000000000', 'DefaultRegion', 'PID_a', 'orders', 'ID1'], ['ID1', 'k1', 'k2'])
>>> decode(data)[0] == ctx
True
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from sparkmq.errors import TraceDataError

CONTENT_SEPARATOR = "\x01"  # TraceConstants.CONTENT_SPLITOR
FIELD_SEPARATOR = "\x02"  # TraceConstants.FIELD_SPLITOR
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"  # TopicValidator.RMQ_SYS_TRACE_TOPIC
DEFAULT_REGION = "DefaultRegion"  # MixAll.DEFAULT_TRACE_REGION_ID
NULL = "null"
#: MessageType's ordinals
MESSAGE_TYPES = ("Normal_Msg", "Trans_Msg_Half", "Trans_msg_Commit", "Delay_Msg")
NORMAL_MSG, TRANS_MSG_HALF, TRANS_MSG_COMMIT, DELAY_MSG = range(4)
#: ConsumeReturnType's ordinals: a SubAfter record's context code
CONSUME_SUCCESS, CONSUME_TIME_OUT, CONSUME_EXCEPTION, CONSUME_RETURN_NULL, CONSUME_FAILED = range(5)
TRANSACTION_STATES = ("COMMIT_MESSAGE", "ROLLBACK_MESSAGE", "UNKNOW")


class TraceType(enum.Enum):
    PUB = "Pub"
    SUB_BEFORE = "SubBefore"
    SUB_AFTER = "SubAfter"
    END_TRANSACTION = "EndTransaction"


@dataclass(frozen=True)
class TraceBean:
    """One traced message (Java's ``TraceBean``); ``None`` tags/keys are Java's ``null``."""

    topic: str = ""
    msg_id: str = ""
    offset_msg_id: str = ""
    tags: str | None = ""
    keys: str | None = ""
    store_host: str = ""
    retry_times: int = 0
    body_length: int = 0
    msg_type: int = NORMAL_MSG
    transaction_id: str | None = None
    transaction_state: str = TRANSACTION_STATES[2]
    from_transaction_check: bool = False


@dataclass(frozen=True)
class TraceContext:
    """One traced event (Java's ``TraceContext``): a send, a consume's start or end, a transaction's end."""

    trace_type: TraceType
    timestamp_ms: int
    region_id: str = DEFAULT_REGION
    group: str = ""
    cost_ms: int = 0
    success: bool = True
    request_id: str = ""
    context_code: int = 0
    beans: tuple[TraceBean, ...] = ()


def _text(value: str | None) -> str:
    return NULL if value is None else value


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _record(fields: list[object]) -> str:
    return CONTENT_SEPARATOR.join(str(f) for f in fields) + FIELD_SEPARATOR


def encode(ctx: TraceContext) -> tuple[str, set[str]]:
    """The records of ``ctx`` and the keys its trace message is indexed by (``TraceTransferBean``)."""
    t, beans = ctx.trace_type, ctx.beans
    if t is TraceType.PUB or t is TraceType.END_TRANSACTION:
        b = beans[0]
        head = [t.value, ctx.timestamp_ms, ctx.region_id, ctx.group, b.topic, b.msg_id, _text(b.tags), _text(b.keys)]
        if t is TraceType.PUB:
            tail: list[object] = [b.body_length, ctx.cost_ms, b.msg_type, b.offset_msg_id, _bool(ctx.success)]
        else:
            tail = [b.msg_type, _text(b.transaction_id), b.transaction_state, _bool(b.from_transaction_check)]
        data = _record([*head, b.store_host, *tail])
    elif t is TraceType.SUB_BEFORE:
        data = "".join(
            _record([t.value, ctx.timestamp_ms, ctx.region_id, ctx.group, ctx.request_id, b.msg_id, b.retry_times,
                     _text(b.keys)])
            for b in beans
        )  # fmt: skip
    else:
        data = "".join(
            _record([t.value, ctx.request_id, b.msg_id, ctx.cost_ms, _bool(ctx.success), _text(b.keys),
                     ctx.context_code, ctx.timestamp_ms, ctx.group])
            for b in beans
        )  # fmt: skip
    keys: set[str] = set()
    for b in beans:
        keys.add(b.msg_id)
        if b.keys:
            keys.update(k for k in b.keys.split(" ") if k)
    return data, keys


def _java_split(text: str, separator: str) -> list[str]:
    """``String.split``: trailing empty strings are dropped."""
    parts = text.split(separator)
    while parts and not parts[-1]:
        parts.pop()
    return parts


def _nullable(value: str) -> str | None:
    return None if value == NULL else value


def _int(value: str, what: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise TraceDataError(f"trace field {what} is not a number: {value[:40]!r}") from None


def _decode_record(line: list[str]) -> TraceContext | None:
    kind = line[0]
    if kind == "Pub":
        ts, region, group, topic, msg_id, tags, keys, host, length, cost, msg_type = line[1:12]
        offset_id, success = (line[12], line[13]) if len(line) >= 14 else ("", line[12])
        bean = TraceBean(
            topic, msg_id, offset_id, _nullable(tags), _nullable(keys), host,
            body_length=_int(length, "bodyLength"), msg_type=_msg_type(msg_type),
        )  # fmt: skip
        return TraceContext(
            TraceType.PUB, _int(ts, "timeStamp"), region, group, _int(cost, "costTime"), success == "true",
            beans=(bean,),
        )  # fmt: skip
    if kind == "SubBefore":
        ts, region, group, request_id, msg_id, retry, keys = line[1:8]
        bean = TraceBean(msg_id=msg_id, keys=_nullable(keys), retry_times=_int(retry, "retryTimes"))
        return TraceContext(
            TraceType.SUB_BEFORE, _int(ts, "timeStamp"), region, group, request_id=request_id, beans=(bean,)
        )
    if kind == "SubAfter":
        request_id, msg_id, cost, success, keys = line[1:6]
        code = _int(line[6], "contextCode") if len(line) >= 7 else 0
        at, group = (_int(line[7], "timeStamp"), line[8]) if len(line) >= 9 else (0, "")
        return TraceContext(
            TraceType.SUB_AFTER, at, "", group, _int(cost, "costTime"), success == "true", request_id, code,
            (TraceBean(msg_id=msg_id, keys=_nullable(keys)),),
        )  # fmt: skip
    if kind == "EndTransaction":
        ts, region, group, topic, msg_id, tags, keys, host, msg_type, tx_id, state, from_check = line[1:13]
        if state not in TRANSACTION_STATES:
            raise TraceDataError(f"trace field transactionState is not a LocalTransactionState: {state[:40]!r}")
        bean = TraceBean(
            topic, msg_id, "", _nullable(tags), _nullable(keys), host, msg_type=_msg_type(msg_type),
            transaction_id=_nullable(tx_id), transaction_state=state, from_transaction_check=from_check == "true",
        )  # fmt: skip
        return TraceContext(TraceType.END_TRANSACTION, _int(ts, "timeStamp"), region, group, beans=(bean,))
    return None  # another type, or an empty record: skipped, as Java does


_MIN_FIELDS = {"Pub": 13, "SubBefore": 8, "SubAfter": 6, "EndTransaction": 13}


def _msg_type(value: str) -> int:
    ordinal = _int(value, "msgType")
    if not 0 <= ordinal < len(MESSAGE_TYPES):
        raise TraceDataError(f"trace field msgType is not a MessageType ordinal: {ordinal}")
    return ordinal


def decode(data: str) -> list[TraceContext]:
    """The trace contexts of a trace message body (``decoderFromTraceDataString``), one bean each.

    Raises :class:`TraceDataError` naming the first record that is short or has a bad number.
    """
    contexts = []
    for record in _java_split(data, FIELD_SEPARATOR):
        line = record.split(CONTENT_SEPARATOR)  # an empty last field is kept, where Java's split drops it
        need = _MIN_FIELDS.get(line[0], 0)
        if len(line) < need:
            raise TraceDataError(f"{line[0]} trace record has {len(line)} fields, needs {need}")
        ctx = _decode_record(line)
        if ctx is not None:
            contexts.append(ctx)
    return contexts


def decode_body(body: bytes) -> list[TraceContext]:
    """:func:`decode` of a trace message's body bytes (UTF-8, as Java's ``new String(body, UTF_8)``)."""
    return decode(body.decode("utf-8", errors="replace"))
