"""The producer's lean single send: a plain send's first attempt with no coroutine, Task or Future of its own.

A plain send (no selector, fixed queue, oneway or ACL signer) whose topic's lane and broker
connection are ready is, with the C lane, ONE call of ``client_lane.c``'s ``Sender`` (route, queue, id,
frame, table and deadline entries, the coalesced write), its waiter a C ``Waiter`` that behaves as
:class:`CallbackSend` (or completes ``send()``'s future with the result). The Python reference, for
``SPARKMQ_NATIVE=0`` and for the messages the ``Sender`` leaves to it: ``AsyncProducer._lean_send`` (one C
call for the unique id and frame, ``send_frame``, or the template f-string of :class:`SendTemplate`), one
dict entry and one deadline entry on the connection, and one append to the loop turn's coalesced write.
``AsyncProducer.send`` awaits an asyncio future for the answer; ``send_async`` and the blocking
``Producer`` register a :class:`CallbackSend` instead, which settles the answer inside the connection's
read and completes the caller's future (and callback) at once: no extra future, no loop turn through ``call_soon``.
A failed or unconfirmed first attempt goes on through the producer's general retry path, as
before, in a Task.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sparkmq.client.fault import FIRST_PAUSING_MS
from sparkmq.client.message import WAIT_FALSE_PREFIX, WAIT_TRUE_PREFIX, Message, SendResult, SendStatus
from sparkmq.client.routes import TopicRoute
from sparkmq.client.send_frames import SendTemplate
from sparkmq.client.send_outcome import SendCallback, SendFuture, answer_outcome, complete, logger, settle_from
from sparkmq.errors import SparkmqError
from sparkmq.message.msgid import UniqueIdGenerator
from sparkmq.protocol import RequestCode
from sparkmq.protocol.bodies import MessageQueue
from sparkmq.protocol.codes import MAX_FRAME_BYTES
from sparkmq.remoting import client_native
from sparkmq.remoting.client_connection import LEAN_BUSY_FRAMES, LEAN_CHUNK_FRAMES, ClientConnection
from sparkmq.remoting.connection import COALESCE_MAX_BYTES

if TYPE_CHECKING:
    from sparkmq.client.producer import AsyncProducer

__all__ = ["RESULT_FIELDS", "WAITER_FIELDS", "CallbackSend", "Lane", "SendIds", "slotted"]

_SEND_OK = SendStatus.SEND_OK
_HEX2 = tuple(f"{byte:02X}" for byte in range(256))


def _slotted_python(cls: type[Any], names: tuple[str, ...], *values: Any) -> Any:
    return cls(*values)


#: ``slotted(cls, names, *values)``: ``cls(*values)`` for a class whose ``__init__`` only stores ``names`` in
#: order (``SendResult``, ``CallbackSend``), built in C when the client lane is (``client_lane.c``: no Python
#: ``__init__`` frame; a SendResult in 0.13 µs instead of 0.53, timeit).
slotted: Callable[..., Any] = client_native.slotted or _slotted_python
#: SendResult's fields in its ``__init__``'s order, for ``slotted``
RESULT_FIELDS = ("status", "msg_id", "offset_msg_id", "queue", "queue_offset")


@dataclass(slots=True)
class Lane:
    """A topic's route as last seen, its writable queues, header template and broker connections;
    ``lean``: plain sends may take the lean path (writable queues, no ACL signer)."""

    route: TopicRoute
    queues: list[MessageQueue]
    template: SendTemplate
    lean: bool
    connections: dict[str, ClientConnection] = field(default_factory=dict)


class SendIds(UniqueIdGenerator):
    """:meth:`UniqueIdGenerator.next_id` for a clock read the sender made already (its born timestamp),
    the id's text up to the counter rendered once per millisecond.

    >>> ids = SendIds()
    >>> a, b = ids.at(1_700_000_000_000), ids.at(1_700_000_000_000)
    >>> len(a), a[:28] == b[:28], a != b
    (32, True, True)
    """

    #: the millisecond ``head`` is the id text of (up to the counter), read by the producer's lean send
    head_ms = -1
    head = ""

    def __init__(self) -> None:
        super().__init__()
        self.counter = self._counter  # an id ends in the low 16 bits of next(counter), as 4 uppercase hex digits

    def head_at(self, now_ms: int) -> str:
        """The ids' text of the millisecond ``now_ms`` up to the counter (28 characters), remembered as ``head``."""
        if now_ms != self.head_ms:
            if now_ms >= self._next_month_ms:
                self._new_month(now_ms)
            self.head = f"{self._prefix}{(now_ms - self._month_start_ms) & 0xFFFFFFFF:08X}"
            self.head_ms = now_ms
        return self.head

    def at(self, now_ms: int) -> str:
        """A new id for the time ``now_ms`` (ms since the epoch, from ``time.time``)."""
        head = self.head if now_ms == self.head_ms else self.head_at(now_ms)
        counter = next(self._counter) & 0xFFFF
        return f"{head}{_HEX2[counter >> 8]}{_HEX2[counter & 0xFF]}"  # a third faster than :04X


class CallbackSend:
    """The waiter of one lean attempt of ``send_async`` / the blocking ``Producer``: the connection calls
    ``set_result`` with the answer (inside its read) or ``set_exception`` with the request's failure."""

    __slots__ = ("callback", "future", "message", "producer", "queue", "started", "unique_id")

    def __init__(
        self,
        producer: AsyncProducer,
        message: Message,
        unique_id: str,
        queue: MessageQueue,
        future: SendFuture,
        callback: SendCallback | None,
        started: float,
    ) -> None:
        self.producer, self.message, self.unique_id, self.queue = producer, message, unique_id, queue
        self.future, self.callback, self.started = future, callback, started  # started: time.monotonic()

    def done(self) -> bool:
        return False  # the connection holds it only until its one answer or failure

    def set_result(self, response: Any) -> None:
        """The broker answered: complete the caller's future, or retry as ``send`` does."""
        faults, queue = self.producer.faults, self.queue
        latency_ms = (time.monotonic() - self.started) * 1000
        if latency_ms >= FIRST_PAUSING_MS or faults.paused:
            faults.succeeded(queue.broker_name, latency_ms)
        if type(response) is tuple:  # a SUCCESS the C lane read: (msgId, queueOffset); complete() inlined
            future, callback = self.future, self.callback
            if not future.done():
                future.set_result(
                    slotted(SendResult, RESULT_FIELDS, _SEND_OK, self.unique_id, response[0], queue, response[1])
                )
            if callback is not None:
                try:
                    callback(future)
                except Exception as exc:
                    _callback_raised(callback, exc)
            return
        _answered(self, response)

    def set_exception(self, error: BaseException) -> None:
        """The request failed (deadline passed, connection lost): retry as ``send`` does."""
        _failed(self, error)


def _answered(waiter: Any, response: Any) -> None:
    """A lean ``send_async`` attempt (a :class:`CallbackSend` or the C lane's ``Waiter``) got an answer that is
    not a SUCCESS of the C lane's shape (its latency noted already): complete, or retry as ``send`` does."""
    try:
        outcome = answer_outcome(response, waiter.unique_id, waiter.queue, waiter.message.topic)
    except SparkmqError as exc:  # not retriable
        complete(waiter.future, waiter.callback, error=exc)
        return
    if type(outcome) is SendResult:
        complete(waiter.future, waiter.callback, outcome)
    else:
        _retry(waiter, outcome, answered=True)


def _failed(waiter: Any, error: BaseException) -> None:
    """A lean ``send_async`` attempt's request failed (deadline passed, connection lost): retry as ``send`` does."""
    waiter.producer.faults.record(waiter.queue.broker_name, 0, failed=True)
    _retry(waiter, error, answered=False)


def _retry(waiter: Any, error: Any, answered: bool) -> None:
    producer, message = waiter.producer, waiter.message
    body, sys_flag = producer._body_of(message)  # what the first attempt sent: it passed these checks
    properties = message.properties_text(waiter.unique_id)
    failed = (waiter.queue.broker_name, error, answered)
    retries = producer._send_prepared(message, body, sys_flag, waiter.unique_id, properties, failed=failed)
    settle_from(retries, waiter.future, waiter.callback)


def _callback_raised(callback: Any, exc: BaseException) -> None:
    logger.error("send callback %r raised", callback, exc_info=exc)


#: CallbackSend's fields in its ``__init__``'s order, for ``slotted``
WAITER_FIELDS = ("producer", "message", "unique_id", "queue", "future", "callback", "started")
if client_native.set_never_done is not None:
    client_native.set_never_done(CallbackSend)  # its done() is always False: the C lane need not ask
if client_native.configure is not None:
    client_native.configure(
        SendResult,
        RESULT_FIELDS,
        _SEND_OK,
        SendTemplate.START_BYTES,
        WAIT_TRUE_PREFIX,
        WAIT_FALSE_PREFIX,
        RequestCode.SEND_MESSAGE_V2,
        _answered,
        _failed,
        _callback_raised,
        float(FIRST_PAUSING_MS),
        LEAN_CHUNK_FRAMES,
        LEAN_BUSY_FRAMES,
        COALESCE_MAX_BYTES,
        MAX_FRAME_BYTES,
    )
