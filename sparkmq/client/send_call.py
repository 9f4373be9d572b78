"""One send in flight: its request, its attempts and its retry policy, and what it completes.

Every send of a producer (``send``, ``send_async``, oneway, batch, a transaction's half message,
the blocking ``Producer``) is one :class:`SendCall`. An attempt picks a queue (fault avoidance:
brokers that failed or were slow, and the one that just failed, are skipped while another is
usable), renders the frame from the topic's template and hands it to the broker's connection
with the call itself as the waiter: the connection calls ``set_result`` with the answer inside
its read, or ``set_exception`` when the deadline passed or the connection closed. No Task and no
coroutine per send while the topic's route and the broker's connection are ready; a route to
fetch or a connection to open is awaited in a Task, then the attempt goes on.

The retry policy is RocketMQ's ``sendDefaultImpl``: ``1 + retry_times_when_send_failed`` attempts
(one for a selector or a fixed queue), each after a failure going to another broker when there is
one; a failed request or a retriable refusal pauses its broker (``LatencyFaultTolerance``), an answer's
latency is noted.
A non-retriable answer is raised at once. FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT and
SLAVE_NOT_AVAILABLE are retried on another broker (``retryAnotherBrokerWhenNotStoreOK``, always on
here) and, when every attempt got one, raised as ``DurabilityNotConfirmedError``.
A producer with a ``retry_timeout_s`` goes on past those attempts while the failure is retriable (a
send to a chosen queue too; an unconfirmed store at most ``1 + retry_times_when_send_failed`` times;
never a half message):
each further try reads the route anew after a pause (doubling up to ``RETRY_MAX_PAUSE_S``), until
``retry_timeout_s`` after the first failure. That outlasts a group's election of a new master (a
queue names the broker group, not its master).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sparkmq.client.fault import FIRST_PAUSING_MS
from sparkmq.client.message import Message, SendResult, SendStatus
from sparkmq.client.queue_select import QueueSelector
from sparkmq.client.routes import TopicRoute
from sparkmq.client.send_frames import SendTemplate
from sparkmq.client.send_outcome import SendCallback, SendFuture, answer_outcome, complete, log_failed, logger
from sparkmq.errors import DurabilityNotConfirmedError, RemoteError, SparkmqError
from sparkmq.message.layout import TRANSACTION_PREPARED_TYPE
from sparkmq.message.msgid import UniqueIdGenerator
from sparkmq.protocol import RequestCode
from sparkmq.protocol.bodies import MessageQueue
from sparkmq.remoting.client import Signer
from sparkmq.remoting.client_connection import ClientConnection

if TYPE_CHECKING:
    from sparkmq.client.producer import AsyncProducer

__all__ = ["Lane", "SendCall", "SendIds"]

_SEND_OK = SendStatus.SEND_OK
_BATCH = int(RequestCode.SEND_BATCH_MESSAGE)  # a plain int: an int's comparison is the interpreter's fast one
RETRY_FIRST_PAUSE_S = 0.05
RETRY_MAX_PAUSE_S = 1.0
_monotonic = time.monotonic
_new_result = object.__new__
_FIRST_PAUSING_S = FIRST_PAUSING_MS / 1000


@dataclass(slots=True)
class Lane:
    """A topic's route as last seen, its writable queues, header template, the client's ACL signer (None:
    it does not sign), broker connections, and the C render of its unsigned frames (None: the template's)."""

    route: TopicRoute
    queues: list[MessageQueue]
    template: SendTemplate
    signer: Signer | None
    connections: dict[str, ClientConnection] = field(default_factory=dict)
    render: Callable[..., bytes | None] | None = None
    fields: bytes = b""

    def __post_init__(self) -> None:
        if self.signer is None:
            self.render, self.fields = self.template.native_render()


class SendIds(UniqueIdGenerator):
    """:meth:`UniqueIdGenerator.next_id` in parts, for a clock read the sender made already (its born
    timestamp): ``head``, the id's text up to its counter, rendered once per millisecond by :meth:`renew`, and
    each send's ``next(counter)``, 0 to 0xFFFF then 0 again (as ``next_id``'s counter masked), the id's last four
    hex digits (``SendTemplate.frame``'s ``id_head`` and ``id_tail``).

    >>> ids = SendIds()
    >>> ids.renew(1_700_000_000_000)
    >>> tail = next(ids.counter)
    >>> len(f"{ids.head}{tail:04X}")
    32
    """

    head_ms = -1
    head = ""

    def __init__(self) -> None:
        super().__init__()
        # the counter's masked values, without a mask per send (next_id and next_ids mask them as before)
        counter = itertools.chain.from_iterable(itertools.repeat(range(0x10000)))
        self._counter = self.counter = counter  # type: ignore[assignment]

    def renew(self, now_ms: int) -> None:
        """The head for the time ``now_ms`` (ms since the epoch, from ``time.time``)."""
        if now_ms >= self._next_month_ms:
            self._new_month(now_ms)
        self.head = f"{self._prefix}{(now_ms - self._month_start_ms) & 0xFFFFFFFF:08X}"
        self.head_ms = now_ms


class SendCall:
    """One send: the request's fields, its attempts so far and the future (and callback) it completes.

    Also the waiter of its attempt's request on the connection (``done``, ``set_result``,
    ``set_exception``, as an asyncio future has them).
    """

    # Slots for what every send sets or every attempt reads (one allocation, no values array to free), the
    # instance's dict only for what a retry, a chosen queue or a oneway send sets (read from the class till then)
    __slots__ = (
        "__dict__", "body", "born_ms", "callback", "code", "connection", "flag", "future", "id_head", "id_tail",
        "opaque", "plain", "producer", "properties_json", "queue", "started", "sys_flag", "topic",
    )  # fmt: skip
    attempt = 0
    #: ``(selector, arg, message, fixed queue)`` of a send to a chosen queue (one attempt), else None
    pick: tuple[QueueSelector | None, Any, Message, MessageQueue | None] | None = None
    last_broker: str | None = None  # the broker of the failed attempt before, avoided by the next
    oneway = False  # read only when not plain
    give_up_at = 0.0  # monotonic: the end of the retry_timeout_s window, once the first attempt failed
    producer: AsyncProducer
    topic: str
    body: bytes
    properties_json: str  # as SendTemplate.frame takes it, with id_head and id_tail
    id_head: str
    id_tail: int
    sys_flag: int
    flag: int
    born_ms: int
    future: SendFuture
    callback: SendCallback | None
    #: an attempt to a round-robin queue (no pick, no broker to avoid, not oneway)
    plain: bool
    code: int
    connection: ClientConnection  # the attempt's connection and opaque, once written
    opaque: int
    queue: MessageQueue
    started: float  # the attempt's write, on the connection's loop clock (a monotonic one)

    @classmethod
    def prepared(
        cls,
        producer: AsyncProducer,
        topic: str,
        code: int,
        body: bytes,
        properties_json: str,
        unique_id: str,
        sys_flag: int,
        flag: int,
        born_ms: int,
        future: SendFuture,
    ) -> SendCall:
        """A send whose request is made (a batch, a transaction's half message): ``unique_id`` whole. (A
        producer's single sends set the same fields on ``SendCall()`` themselves: no constructor's frame.)"""
        call = cls()
        call.producer, call.topic, call.code, call.body = producer, topic, code, body
        call.properties_json, call.id_head, call.id_tail = properties_json, unique_id, -1
        call.sys_flag, call.flag, call.born_ms = sys_flag, flag, born_ms
        call.future, call.callback, call.plain = future, None, True
        return call

    @property
    def unique_id(self) -> str:
        """The message's unique id: ``id_head`` and, unless ``id_tail`` is -1, its last four hex digits."""
        return self.id_head if self.id_tail < 0 else f"{self.id_head}{self.id_tail:04X}"

    def route_to(self, selector: QueueSelector | None, arg: Any, message: Message, fixed: MessageQueue | None) -> None:
        """Send to ``fixed``, or the queue ``selector(queues, message, arg)`` picks: one attempt, no retry."""
        self.pick = selector, arg, message, fixed
        self.plain = False

    def one_way(self) -> None:
        """Send without waiting for an answer (one attempt, a result without offsets)."""
        self.oneway = True
        self.plain = False

    # -- attempts ---------------------------------------------------------------------------------------
    def go(self, queue: MessageQueue | None = None) -> None:
        """Make the next attempt (the first one too), to ``queue`` when the attempt chose it already: now if the
        topic's route and the queue's connection are ready, else in a Task that makes them ready and comes back."""
        try:
            producer, topic = self.producer, self.topic
            lane = producer._lanes.get(topic)
            if lane is None or producer._routes.get(topic) is not lane.route:
                self._later(None)
                return
            if queue is None:
                queues = lane.queues
                if not queues:
                    self._unwritable()
                    return
                if self.plain and not producer.faults.paused:
                    queue = queues[next(producer._counter) % len(queues)]
                else:
                    queue = self._choose(lane)
            connection = lane.connections.get(queue.broker_name)
            if connection is None or not connection.open:
                self._later(queue)
                return
            self.queue = queue
            opaque = connection.next_opaque()
            code, render, oneway = self.code, lane.render, not self.plain and self.oneway
            if render is None or oneway:
                frame = None
            else:  # SendTemplate.frame's first step, without its Python frame
                frame = render(
                    code, 0, opaque, lane.fields, queue.queue_id, self.sys_flag, self.born_ms, self.flag,
                    self.properties_json, self.id_head, self.id_tail, code == _BATCH, self.body,
                )  # fmt: skip
            if frame is None:  # the reference: a signed frame, or the error of one over the maximum
                frame = lane.template.frame(
                    code, queue.queue_id, opaque, self.born_ms, self.properties_json, self.body, self.sys_flag,
                    self.flag, oneway, lane.signer, self.id_head, self.id_tail,
                )  # fmt: skip
            if oneway:
                connection.write_frame(frame)
                self._finish(SendResult(_SEND_OK, self.unique_id, "", queue, -1), None)
                return
            self.connection, self.opaque = connection, opaque
            self.started = connection.send_lean(opaque, code, frame, self, producer.send_timeout_s)
        except Exception as exc:  # noqa: BLE001 - a selector's or the frame's error is the send's outcome
            self._finish(None, exc)

    def _later(self, queue: MessageQueue | None) -> None:
        preparing = self.producer._preparing  # held until done: the loop keeps only a weak reference to a Task
        task = asyncio.get_running_loop().create_task(self._prepare(queue))
        preparing.add(task)
        task.add_done_callback(preparing.discard)

    async def _prepare(self, queue: MessageQueue | None) -> None:
        """Get the attempt's route (``queue`` None: then choose its queue) or connection, then make it."""
        producer = self.producer
        try:
            if queue is None:
                lane = await producer._new_lane(self.topic)
                if not lane.queues:
                    self._unwritable()
                    return
                queue = self._choose(lane)
            else:  # the queue the attempt chose (a selector is asked once per attempt), its lane as it is now
                lane = producer._lanes.get(self.topic) or await producer._new_lane(self.topic)
            connection = lane.connections.get(queue.broker_name)
            if connection is None or not connection.is_open:
                try:
                    connection = await producer._connect(lane, queue.broker_name)
                    if not connection.open:  # closed as it opened: a failed attempt, never another connect
                        raise RemoteError(f"connection to {queue.broker_name} closed as it opened", retriable=True)
                except RemoteError as exc:
                    self.queue = queue
                    self.set_exception(exc)
                    return
            self.go(queue)
        except BaseException as exc:  # noqa: BLE001 - the caller's future carries every failure
            self._finish(None, exc)
            if not isinstance(exc, Exception):
                raise

    def _unwritable(self) -> None:
        """The route has no writable queue (e.g. between a master's death and its successor's registration):
        a failed attempt; the next one asks the NameServers again."""
        self._retry(RemoteError(f"topic {self.topic} has no writable queue", retriable=True), False, None)

    def _choose(self, lane: Lane) -> MessageQueue:
        queues = lane.queues
        if self.pick is not None:
            selector, arg, message, fixed = self.pick
            return fixed if fixed is not None else selector(queues, message, arg)  # type: ignore[misc]
        return self.producer._pick(queues, self.last_broker)

    def forget(self) -> None:
        """Its caller stopped waiting (cancelled): the attempt in flight leaves the connection's table."""
        connection = getattr(self, "connection", None)  # unset until an attempt is written
        if connection is not None:
            connection.forget(self.opaque)

    # -- the connection's waiter -------------------------------------------------------------------------
    #: Always False (the connection holds a call only until its one answer or failure): a C call, not a frame.
    done = staticmethod(bool)

    def set_result(self, response: Any) -> None:
        """The broker answered the attempt: complete, raise a non-retriable answer, or retry."""
        elapsed = _monotonic() - self.started
        if response.code == 0:  # SUCCESS: the common answer, read here without answer_outcome's steps
            try:  # a lean answer's two fields, without its extFields dict
                offset_msg_id, queue_offset = response.msg_id, response.queue_offset
            except AttributeError:  # a RemotingCommand (a header of another shape): answer_outcome reads it
                offset_msg_id = queue_offset = None
            # int() reads it: SendResult.queue_offset does, when first read; answer_outcome raises the precise error
            if queue_offset is not None and offset_msg_id is not None and queue_offset.isdecimal():
                result = _new_result(SendResult)  # SendResult.__init__'s stores without its frame
                result._status, result._msg_id, result._id_tail = _SEND_OK, self.id_head, self.id_tail
                result._offset_msg_id, result._queue_offset, result._queue = offset_msg_id, queue_offset, self.queue
                faults = self.producer.faults
                if elapsed >= _FIRST_PAUSING_S or faults.paused:
                    faults.succeeded(self.queue.broker_name, elapsed * 1000)
                future, callback = self.future, self.callback
                if not future.done():
                    future.set_result(result)
                if callback is not None:
                    try:
                        callback(future)
                    except Exception:
                        logger.exception("send callback %r raised", callback)
                return
        faults, broker, latency_ms = self.producer.faults, self.queue.broker_name, elapsed * 1000
        try:
            outcome = answer_outcome(response, self.unique_id, self.queue, self.topic)
        except SparkmqError as exc:  # not retriable: the broker works, the request is refused
            faults.succeeded(broker, latency_ms)
            self._finish(None, exc)
            return
        if type(outcome) is SendResult:
            faults.succeeded(broker, latency_ms)
            self._finish(outcome, None)
        elif type(outcome) is DurabilityNotConfirmedError:  # stored, not as promised: another broker next
            faults.succeeded(broker, latency_ms)
            self._retry(outcome, True, broker)
        else:  # a retriable refusal (busy, not available, ...): the broker is paused, as after a failure
            faults.record(broker, 0, failed=True)
            self._retry(outcome, True, broker)

    def set_exception(self, error: BaseException) -> None:
        """The attempt's request failed (deadline passed, connection lost or refused): retry."""
        self.producer.faults.record(self.queue.broker_name, 0, failed=True)
        if isinstance(error, SparkmqError):
            self._retry(error, False, self.queue.broker_name)
        else:
            self._finish(None, error)

    def _retry(self, error: SparkmqError, answered: bool, broker: str | None) -> None:
        """The attempt to ``broker`` (None: no queue to send to) failed: the next one, or ``error`` raised."""
        attempts = 1 if self.pick is not None else 1 + self.producer.retry_times
        self.attempt += 1
        pause = 0.0 if self.attempt < attempts else self._pause(error)
        if broker is not None:
            log_failed(broker, self.attempt, attempts, error, answered, pause, self.give_up_at - _monotonic())
        if pause < 0:
            self._finish(None, error)
        elif not self.future.done():  # else cancelled: nobody waits for the outcome
            self.last_broker = broker or self.last_broker
            self.plain = False
            self.producer._routes.pop(self.topic, None)  # the next attempt reads the route anew
            if pause:
                asyncio.get_running_loop().call_later(pause, self._again)
            else:
                self.go()

    def _pause(self, error: SparkmqError) -> float:
        """The pause before a try past the attempts, or -1: give up (not retriable, or out of time). A stored
        but unconfirmed message gets no more tries than RocketMQ's attempts: each one stores it again."""
        window, retry_times = self.producer.retry_timeout_s, self.producer.retry_times
        if window <= 0 or not error.retriable or self.sys_flag & TRANSACTION_PREPARED_TYPE:
            return -1.0  # a half message tried again might be stored twice in one transaction
        if type(error) is DurabilityNotConfirmedError and self.attempt > retry_times:
            return -1.0
        now = _monotonic()
        if not self.give_up_at:
            self.give_up_at = now + window
        extra = self.attempt - (1 if self.pick is not None else 1 + retry_times)
        pause = min(RETRY_FIRST_PAUSE_S * 2**extra, RETRY_MAX_PAUSE_S)
        return pause if now + pause < self.give_up_at else -1.0

    def _again(self) -> None:
        if not self.future.done():
            self.go()

    def _finish(self, result: SendResult | None, error: BaseException | None) -> None:
        future = self.future
        if future.done():  # cancelled by its caller: the callback still hears of it
            pass
        elif error is None:
            future.set_result(result)  # type: ignore[arg-type]
        elif isinstance(error, asyncio.CancelledError) and isinstance(future, asyncio.Future):
            future.cancel()
        else:
            future.set_exception(error)
        if self.callback is not None:
            complete(future, self.callback)
