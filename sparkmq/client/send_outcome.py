"""What a send attempt's answer means: a SendResult, an error to retry, or one to raise.

An answer is a ``LeanResponse`` (the connection's typed decode of a plain header) or, for a
header of another shape, the ``RemotingCommand``: both have the same fields, checked the same way.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, cast

from sparkmq.client.loop_thread import Handoff
from sparkmq.client.message import SendResult, SendStatus
from sparkmq.client.responses import check_response
from sparkmq.errors import DurabilityNotConfirmedError, RemoteError, SparkmqError
from sparkmq.protocol import RemotingCommand, ResponseCode
from sparkmq.protocol.bodies import MessageQueue
from sparkmq.protocol.headers import SendMessageResponseHeader
from sparkmq.remoting.client_connection import LeanResponse

logger = logging.getLogger("sparkmq.client.producer")

#: A send's future: an asyncio one (``AsyncProducer.send_async``), a concurrent one (the blocking
#: ``Producer.send_async``) or the blocking ``Producer.send``'s :class:`~sparkmq.client.loop_thread.Handoff`.
SendFuture = asyncio.Future[SendResult] | Future[SendResult] | Handoff[SendResult]
#: Called with the completed future (Java's ``SendCallback``).
SendCallback = Callable[[Any], None]

# Answers that mean "stored, but not as durably as promised": not delivered, retried.
_NOT_CONFIRMED_CODES = (
    ResponseCode.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE,
)


def log_failed(
    broker: str, attempt: int, attempts: int, error: SparkmqError, answered: bool, pause_s: float, left_s: float
) -> None:
    """Log the failed ``attempt`` (from 1) of ``attempts``, and what follows: another attempt, a try of the
    retry_timeout_s window after ``pause_s`` with ``left_s`` of it left (``pause_s`` > 0), or none (< 0)."""
    what = "not acknowledged" if answered else "failed"
    if pause_s > 0:
        then = f"attempt {attempt}, retrying in {pause_s:.2f} s, {left_s:.1f} s of the retry window left"
    elif pause_s < 0:
        then = f"attempt {attempt}/{attempts}, giving up" if attempt <= attempts else f"attempt {attempt}, giving up"
    else:
        then = f"attempt {attempt}/{attempts}"
    logger.warning("send to %s %s (%s): %s", broker, what, then, error.remark)


def answer_outcome(response: RemotingCommand | LeanResponse, unique_id: str, queue: MessageQueue, topic: str) -> Any:
    """The SendResult of a SUCCESS answer, or the retriable error of another; raises a non-retriable one."""
    if response.code != ResponseCode.SUCCESS:
        error = _send_error(response, topic)
        if not error.retriable:
            raise error
        return error
    return _result(response.ext_fields or {}, unique_id, queue)


def _result(fields: dict[str, str], unique_id: str, queue: MessageQueue) -> SendResult:
    try:
        return SendResult(SendStatus.SEND_OK, unique_id, fields["msgId"], queue, int(fields["queueOffset"]))
    except (KeyError, ValueError):
        header = SendMessageResponseHeader.from_fields(fields)  # raises the precise InvalidFieldError
        return SendResult(SendStatus.SEND_OK, unique_id, header.msg_id, queue, header.queue_offset)


def _send_error(response: Any, topic: str) -> SparkmqError:
    if response.code in _NOT_CONFIRMED_CODES:
        status = ResponseCode(response.code).name
        return DurabilityNotConfirmedError(
            f"send to {topic}: the broker answered {status} ({response.remark or 'no remark'});"
            " the message is not confirmed as stored",
            code=response.code,
            status=status,
        )
    try:
        check_response(response, f"send to {topic}")
    except SparkmqError as exc:
        return exc
    return RemoteError(f"send to {topic}: unexpected code {response.code}")


def complete(
    future: SendFuture,
    callback: SendCallback | None,
    result: SendResult | None = None,
    error: BaseException | None = None,
) -> None:
    """Complete a send's ``future`` (unless its caller cancelled it) with ``result`` or ``error``, then call
    ``callback`` with it; a callback that raises is logged (it runs inside the connection's read)."""
    if not future.done():
        if error is None:
            future.set_result(cast(SendResult, result))
        else:
            future.set_exception(error)
    if callback is not None:
        notify(future, callback)


def sent_result(future: SendFuture) -> SendResult | None:
    """The result of a completed send's future, or None when it failed or was cancelled."""
    if isinstance(future, Handoff):
        value, error = future.outcome()
        return None if error is not None else value
    if future.cancelled() or future.exception() is not None:
        return None
    return future.result()


def notify(future: SendFuture, callback: SendCallback) -> None:
    """Call ``callback`` with the completed ``future``; one that raises is logged (it runs inside a read)."""
    try:
        callback(future)
    except Exception:
        logger.exception("send callback %r raised", callback)
