"""Trace contexts of a client's events, as RocketMQ's ``SendMessageTraceHookImpl``,
``ConsumeMessageTraceHookImpl`` and ``EndTransactionTraceHookImpl`` make them (pure builders)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from sparkmq.client.message import Message, ReceivedMessage, SendResult
from sparkmq.client.trace_data import (
    DEFAULT_REGION,
    DELAY_MSG,
    NORMAL_MSG,
    TRANS_MSG_COMMIT,
    TraceBean,
    TraceContext,
    TraceType,
)
from sparkmq.client.trace_dispatcher import TraceDispatcher
from sparkmq.message.msgid import UniqueIdGenerator
from sparkmq.message.properties import KEY_SEPARATOR, MSG_REGION, TRACE_ON

logger = logging.getLogger(__name__)
_request_ids = UniqueIdGenerator()


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def _keys(keys: Sequence[str] | str | None) -> str | None:
    if not keys:
        return None  # Java's getKeys() of a message without keys
    return keys if isinstance(keys, str) else KEY_SEPARATOR.join(keys)


def pub(
    group: str, message: Message, result: SendResult, started_ms: int, store_host: str, msg_type: int | None = None
) -> TraceContext:
    """A send the broker acknowledged (only those are traced, as in Java)."""
    body = message.body
    length = len(body if isinstance(body, bytes) else message.body_bytes)
    if msg_type is None:
        msg_type = DELAY_MSG if message.delay_level > 0 else NORMAL_MSG
    bean = TraceBean(
        message.topic, result.msg_id, result.offset_msg_id, message.tags or None, _keys(message.keys), store_host,
        body_length=length, msg_type=msg_type,
    )  # fmt: skip
    return TraceContext(TraceType.PUB, started_ms, DEFAULT_REGION, group, max(0, now_ms() - started_ms), True,
                        beans=(bean,))  # fmt: skip


def sub_before(group: str, messages: Sequence[ReceivedMessage]) -> TraceContext | None:
    """The start of a listener call; None when no message of it is traced (``TRACE_ON`` false)."""
    beans = []
    region = DEFAULT_REGION
    for m in messages:
        props = m.properties
        if props.get(TRACE_ON) == "false":
            continue
        region = props.get(MSG_REGION) or region
        beans.append(TraceBean(m.topic, m.msg_id, tags=m.tags, keys=_keys(m.keys), retry_times=m.reconsume_times))
    if not beans:
        return None
    return TraceContext(
        TraceType.SUB_BEFORE, now_ms(), region, group, request_id=_request_ids.next_id(), beans=tuple(beans)
    )


def sub_after(before: TraceContext, success: bool, context_code: int, count: int) -> TraceContext:
    """The end of the listener call ``before`` started: its cost per message and its ``ConsumeReturnType``."""
    at = now_ms()
    return TraceContext(
        TraceType.SUB_AFTER, at, before.region_id, before.group, (at - before.timestamp_ms) // max(count, 1),
        success, before.request_id, context_code, before.beans,
    )  # fmt: skip


def end_transaction(
    group: str,
    message: Message | ReceivedMessage,
    msg_id: str,
    transaction_id: str,
    state: str,
    from_check: bool,
    store_host: str,
) -> TraceContext:
    """An END_TRANSACTION sent by the producer (``from_check``: as the answer to a check-back)."""
    bean = TraceBean(
        message.topic, msg_id, "", message.tags or None, _keys(message.keys), store_host, msg_type=TRANS_MSG_COMMIT,
        transaction_id=transaction_id, transaction_state=state, from_transaction_check=from_check,
    )  # fmt: skip
    region = message.properties.get(MSG_REGION) or DEFAULT_REGION
    return TraceContext(TraceType.END_TRANSACTION, now_ms(), region, group, beans=(bean,))


def consume_started(tracer: TraceDispatcher, group: str, messages: Sequence[ReceivedMessage]) -> TraceContext | None:
    """Queue the SubBefore record of a consume and return it; None (logged) if it cannot be made: a trace
    never fails the consume it traces."""
    try:
        before = sub_before(group, messages)
    except Exception:
        logger.exception("message trace of a consume by %s failed", group)
        return None
    if before is not None:
        tracer.append(before)
    return before


def consume_ended(tracer: TraceDispatcher, before: TraceContext, success: bool, context_code: int, count: int) -> None:
    """Queue the SubAfter record of the consume ``before`` started."""
    tracer.append(sub_after(before, success, context_code, count))
