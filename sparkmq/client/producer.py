"""Producers: ``AsyncProducer`` (asyncio) and ``Producer`` (blocking, same behaviour).

Round-robin over the topic's writable queues, avoiding brokers that recently failed or
were slow; ``retry_times_when_send_failed`` further attempts go to another broker. A send
returns only when the broker stored the message as promised: FLUSH_DISK_TIMEOUT,
FLUSH_SLAVE_TIMEOUT and SLAVE_NOT_AVAILABLE answers are retried like failures and, when
every attempt got one, raise :class:`DurabilityNotConfirmedError` (retriable, ``status``
names the answer); never a "delivered" result. Bodies
of 4 KiB or more are zlib-compressed with RocketMQ's flag. ``send_batch`` encodes the whole
batch into one SEND_BATCH_MESSAGE frame: one write, one acknowledgement.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
import zlib
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import Future
from typing import Any, cast

from sparkmq.client import loop_thread
from sparkmq.client.fault import FIRST_PAUSING_MS, LatencyFaultTolerance
from sparkmq.client.instance import ClientInstance
from sparkmq.client.lean_send import RESULT_FIELDS, WAITER_FIELDS, CallbackSend, Lane, SendIds, slotted
from sparkmq.client.message import WAIT_FALSE_PREFIX, WAIT_TRUE_PREFIX, Message, SendResult, SendStatus
from sparkmq.client.queue_select import QueueSelector
from sparkmq.client.security import ClientSecurity
from sparkmq.client.send_frames import (
    DEFAULT_TOPIC_QUEUE_NUMS,
    Outgoing,
    SendTemplate,
)
from sparkmq.client.send_outcome import (
    SendCallback,
    SendFuture,
    answer_outcome,
    complete,
    log_failed,
    settle_from,
)
from sparkmq.errors import (
    MessageError,
    MessageTooLargeError,
    RemoteError,
    SparkmqError,
)
from sparkmq.message import layout as L
from sparkmq.message.batch import encode_batch_items
from sparkmq.message.names import AUTO_CREATE_TOPIC_KEY
from sparkmq.message.record import validate_topic
from sparkmq.protocol import RequestCode
from sparkmq.protocol.bodies import MessageQueue
from sparkmq.protocol.codes import MAX_FRAME_BYTES
from sparkmq.remoting import client_native
from sparkmq.remoting.client_connection import ClientConnection

logger = logging.getLogger(__name__)
COMPRESS_OVER_BYTES = 4096  # compressMsgBodyOverHowmuch
COMPRESS_LEVEL = 5
# enum members read per send from module globals: a class attribute read of an IntEnum member costs ~0.1 µs
_SEND_V2 = RequestCode.SEND_MESSAGE_V2
_SEND_OK = SendStatus.SEND_OK
_START_BYTES = SendTemplate.START_BYTES
_send_frame = client_native.send_frame  # None: the Python reference path (no C lane, or SPARKMQ_NATIVE=0)

_ASK = object()  # AsyncProducer._send's made: not asked yet
#: A failed attempt: the broker, the error, whether the broker answered (else the request failed).
_Failed = tuple[str, SparkmqError, bool]


class AsyncProducer:
    """Sends messages from asyncio code.

    For example::

        async with AsyncProducer("PID_orders", "127.0.0.1:9876") as producer:
            result = await producer.send(Message("orders", b"hello", tags="books"))
    """

    def __init__(
        self,
        group: str,
        namesrv_addr: str,
        *,
        retry_times_when_send_failed: int = 2,
        send_timeout_s: float = 3.0,
        compress_over_bytes: int = COMPRESS_OVER_BYTES,
        max_message_bytes: int = L.DEFAULT_MAX_MESSAGE_BYTES,
        instance_name: str | None = None,
        security: ClientSecurity | None = None,
    ) -> None:
        self.group = group
        self.instance = ClientInstance(namesrv_addr, instance_name, security=security)
        self.retry_times = retry_times_when_send_failed
        self.send_timeout_s = send_timeout_s
        self.compress_over_bytes = compress_over_bytes
        self.max_message_bytes = max_message_bytes
        self.faults = LatencyFaultTolerance()
        self._ids = SendIds()
        self._counter = itertools.count()
        self._brokers_for: list[MessageQueue] | None = None  # the queue list _pick last saw, and its brokers
        self._brokers: tuple[str, ...] = ()
        self._lanes: dict[str, Lane] = {}
        self._routes = self.instance.routes  # read per send: the same dict for the instance's life
        self._plain_below = min(compress_over_bytes, max_message_bytes + 1)  # a bytes body this short goes as is
        # the whole lean send of a plain message in one C call (None: the Python below, the reference)
        self._sender: Any = (
            None
            if client_native.Sender is None
            else client_native.Sender(
                self, self._lanes, self._routes, self.faults, self._counter, self._ids, self._plain_below
            )
        )

    async def start(self) -> None:
        self.instance.producer_groups.add(self.group)
        await self.instance.start()

    async def close(self) -> None:
        await self.instance.close()

    async def __aenter__(self) -> AsyncProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def send(
        self,
        message: Message,
        *,
        selector: QueueSelector | None = None,
        arg: Any = None,
        queue: MessageQueue | None = None,
        oneway: bool = False,
    ) -> Coroutine[Any, Any, SendResult]:
        """Send one message; with ``selector``/``arg`` (ordered messages) or ``queue`` the queue is fixed.

        A coroutine, as from an ``async def``: await it (or make it a Task); nothing is sent before its first
        step. It returns a ``SEND_OK`` result once the broker stored the message as promised. Raises
        :class:`DurabilityNotConfirmedError` when every attempt was answered FLUSH_DISK_TIMEOUT,
        FLUSH_SLAVE_TIMEOUT or SLAVE_NOT_AVAILABLE (the message may be stored; sending it again
        is safe for at-least-once), and the error tree's other exceptions for other failures.
        """
        sender = self._sender
        if sender is not None and selector is None and queue is None and not oneway:
            # a plain send with the C lane: its coroutine in C (client_lane.c's SendCall), which hands an
            # awaiting frame the request's Waiter and is gone: no Python coroutine in flight per send
            return sender.coroutine(message)  # type: ignore[no-any-return]
        return self._send(message, selector, arg, queue, oneway)

    async def _send(
        self,
        message: Message,
        selector: QueueSelector | None = None,
        arg: Any = None,
        queue: MessageQueue | None = None,
        oneway: bool = False,
        made: Any = _ASK,
    ) -> SendResult:
        """:meth:`send`'s steps; ``made``: what the C lane's ``Sender.send`` returned for this message, when its
        coroutine (SendCall) leaves the send to these steps (None or False), else ``_ASK``."""
        failed: _Failed | None = None
        unique_id: str | None = None
        # The common send: a cached route and an open connection, awaited without a coroutine below this one.
        # The Python lean path: the reference (no C lane: made is _ASK), and the sends the C lane leaves to it
        # (None); False: the C lane found no lean attempt possible (the general path's). The C lane's own
        # attempts never come here: their coroutine (SendCall) awaits the Waiter and goes on in _lean_rest.
        plain = selector is None and queue is None and not oneway and made is not False
        if plain and (lean := self._lean_send(message)) is not None:
            unique_id, frame, chosen, connection, opaque = lean
            started = time.monotonic()
            # request_lean without its second is_open check (_lean_send just made it, with no await since)
            answer: asyncio.Future[Any] = connection.create_future()
            connection.send_lean(opaque, _SEND_V2, frame, answer, self.send_timeout_s)
            try:
                response = await answer
            except RemoteError as exc:
                self.faults.record(chosen.broker_name, 0, failed=True)
                failed = chosen.broker_name, exc, False
            except BaseException:
                connection.forget(opaque)  # cancelled: nobody waits for the answer
                raise
            else:
                latency_ms = (time.monotonic() - started) * 1000
                if latency_ms >= FIRST_PAUSING_MS or self.faults.paused:
                    self.faults.succeeded(chosen.broker_name, latency_ms)
                if type(response) is tuple:  # a SUCCESS the C lane read: (msgId, queueOffset)
                    ok: SendResult = slotted(  # SendResult(...), in C: no cast() call per send
                        SendResult, RESULT_FIELDS, _SEND_OK, unique_id, response[0], chosen, response[1]
                    )
                    return ok
                outcome = answer_outcome(response, unique_id, chosen, message.topic)
                if type(outcome) is SendResult:
                    return outcome
                failed = chosen.broker_name, outcome, True
        # the general path; after a lean attempt, the body it sent (it passed these checks) and its id
        body, sys_flag = self._body_of(message)
        if unique_id is None:
            unique_id = self._ids.next_id()
        properties = message.properties_text(unique_id)
        return await self._send_prepared(
            message, body, sys_flag, unique_id, properties, selector, arg, queue, oneway, failed
        )

    async def _lean_rest(self, waiter: Any, thrown: BaseException | None) -> SendResult:
        """:meth:`send`'s steps after the C lane's lean attempt (its coroutine's ``Waiter``, done) came back
        with anything but a SendResult, or ``thrown`` was thrown into its await: as ``_send`` handles them."""
        message, unique_id, chosen = waiter.message, waiter.unique_id, waiter.queue
        failed: _Failed
        try:
            if thrown is not None:
                raise thrown
            response = waiter.result()
        except RemoteError as exc:
            self.faults.record(chosen.broker_name, 0, failed=True)
            failed = chosen.broker_name, exc, False
        except BaseException:
            waiter.connection.forget(waiter.opaque)  # cancelled: nobody waits for the answer
            raise
        else:
            if type(response) is SendResult:
                return response
            outcome = answer_outcome(response, unique_id, chosen, message.topic)
            if type(outcome) is SendResult:
                return outcome
            failed = chosen.broker_name, outcome, True
        body, sys_flag = self._body_of(message)  # what the attempt sent: it passed these checks
        properties = message.properties_text(unique_id)
        return await self._send_prepared(message, body, sys_flag, unique_id, properties, failed=failed)

    async def _send_prepared(
        self,
        message: Message,
        body: bytes,
        sys_flag: int,
        unique_id: str,
        properties: str,
        selector: QueueSelector | None = None,
        arg: Any = None,
        queue: MessageQueue | None = None,
        oneway: bool = False,
        failed: _Failed | None = None,
    ) -> SendResult:
        out = Outgoing(RequestCode.SEND_MESSAGE_V2, body, properties, unique_id, sys_flag, message.flag)
        return await self._send_with_retries(message.topic, out, selector, arg, message, queue, oneway, failed)

    def send_async(
        self, message: Message, callback: Callable[[asyncio.Future[SendResult]], None] | None = None
    ) -> asyncio.Future[SendResult]:
        """Send without awaiting, from the producer's loop (Java's ``send(msg, SendCallback)``): the
        future completes when the broker acknowledged, or fails as :meth:`send` raises, and then
        ``callback`` is called with it. A plain send in flight costs no Task and no future but this one:
        the answer completes it, and calls ``callback``, inside the connection's read.

        Example (a window of 128 in flight, as a pipelining publisher keeps it)::

            window = asyncio.Semaphore(128)
            for message in messages:
                await window.acquire()
                producer.send_async(message, lambda done: window.release())
        """
        return self._start(message, None, callback)  # type: ignore[return-value]  # an asyncio future here; no cast() call per send

    def start_send(self, message: Message, done: Future[SendResult] | loop_thread.Handoff[SendResult]) -> None:
        """:meth:`send` for a caller on another thread (the blocking ``Producer``): completes ``done`` as
        ``send`` would return or raise; call it on the producer's loop."""
        if done.set_running_or_notify_cancel():
            self._start(message, done, None)

    def _start(self, message: Message, future: SendFuture | None, callback: SendCallback | None) -> SendFuture:
        """Start a send completing ``future`` (None: a new asyncio one) then ``callback``: a lean first
        attempt answered by its :class:`CallbackSend`, or :meth:`send`'s general steps in a Task."""
        try:
            sender = self._sender
            made = None if sender is None else sender.start(message, future, callback)
            if made is not None and made is not False:
                return made  # type: ignore[no-any-return]  # the C lane's lean attempt, answered by its Waiter
            lean = None if made is False else self._lean_send(message)
            if lean is None:
                body, sys_flag = self._body_of(message)
                unique_id = self._ids.next_id()
                properties = message.properties_text(unique_id)
        except Exception as exc:  # noqa: BLE001 - the caller's future carries every failure
            future = future or asyncio.get_running_loop().create_future()
            complete(future, callback, error=exc)
            return future
        if lean is None:
            future = future or asyncio.get_running_loop().create_future()
            settle_from(self._send_prepared(message, body, sys_flag, unique_id, properties), future, callback)
            return future
        unique_id, frame, chosen, connection, opaque = lean
        # the connection's loop is the running one: asyncio.get_running_loop() costs a getpid() per call
        future = future or connection.create_future()
        waiter = slotted(
            CallbackSend, WAITER_FIELDS, self, message, unique_id, chosen, future, callback, time.monotonic()
        )
        connection.send_lean(opaque, _SEND_V2, frame, waiter, self.send_timeout_s)
        return future

    def _lean_send(self, message: Message) -> tuple[str, bytes, MessageQueue, ClientConnection, int] | None:
        """A plain send's first attempt made ready, if the topic's lane and its connection are: the unique id,
        the frame, the queue, the connection and the opaque (else None: ``_send_with_retries`` does it all).

        A plain message (bytes body below the compression size, no properties, tags, keys or delay) gets
        its id and frame from one C call (``client_lane.c``'s ``send_frame``); the Python here is the reference.
        """
        topic = message.topic
        lane = self._lanes.get(topic)
        if lane is None or not lane.lean or self._routes.get(topic) is not lane.route:
            return None
        queues = lane.queues
        chosen = self._pick(queues, None) if self.faults.paused else queues[next(self._counter) % len(queues)]
        connection = lane.connections.get(chosen.broker_name)
        if connection is None or not connection.is_open:
            return None
        body = message.body
        if type(body) is bytes and len(body) < self._plain_below:
            sys_flag = 0
        else:
            body, sys_flag = self._body_of(message)
        born_ms = int(time.time() * 1000)
        opaque = connection.next_opaque()
        ids, template, queue_id = self._ids, lane.template, chosen.queue_id
        if _send_frame is not None and not (
            message.properties or message.tags or message.keys or message.delay_level > 0
        ):
            made = _send_frame(
                _START_BYTES,
                template.middle_bytes.get(queue_id) or template.middle_of(queue_id),
                opaque,
                sys_flag,
                born_ms,
                message.flag,
                WAIT_TRUE_PREFIX if message.wait_store_ok else WAIT_FALSE_PREFIX,
                ids.head if born_ms == ids.head_ms else ids.head_at(born_ms),
                next(ids.counter),
                body,
            )
            if made is not None and len(made[1]) <= MAX_FRAME_BYTES:
                return made[0], made[1], chosen, connection, opaque
        unique_id = ids.at(born_ms)
        properties = message.properties_text(unique_id)
        frame = template.frame(queue_id, opaque, born_ms, properties, body, sys_flag, message.flag)
        return unique_id, frame, chosen, connection, opaque

    async def send_batch(self, messages: Sequence[Message], *, queue: MessageQueue | None = None) -> SendResult:
        """Send messages of one topic as one SEND_BATCH_MESSAGE (≤ 4 MiB, no delay levels); errors as :meth:`send`."""
        if not messages:
            raise MessageError("send_batch needs at least one message")
        topic = messages[0].topic
        validate_topic(topic)
        if any(m.topic != topic for m in messages):
            raise MessageError("every message of a batch must have the same topic")
        if any(m.delay_level > 0 for m in messages):
            raise MessageError("batch messages cannot be delayed")
        ids = self._ids.next_ids(len(messages))
        body = encode_batch_items(
            [m.body if type(m.body) is bytes else m.body_bytes for m in messages],
            [
                # encoded_properties(i) inlined for a plain message (no delay here): half the time per item
                f"{WAIT_TRUE_PREFIX if m.wait_store_ok else WAIT_FALSE_PREFIX}{i}".encode()
                if not (m.properties or m.tags or m.keys)
                else m.encoded_properties(i)
                for m, i in zip(messages, ids, strict=True)
            ],
            [m.flag for m in messages],
        )
        return await self.send_encoded_batch(topic, body, queue, ",".join(ids))

    async def send_encoded_batch(
        self, topic: str, body: bytes, queue: MessageQueue | None, unique_ids: str = ""
    ) -> SendResult:
        """Send items already encoded as a SEND_BATCH_MESSAGE body (``encode_batch_items``' bytes) to ``queue``.

        For callers that encode many items in bulk (the Spark sink builds them from Arrow columns);
        ``send_batch`` does the same from ``Message`` objects.
        """
        validate_topic(topic)
        if len(body) > self.max_message_bytes:
            raise MessageTooLargeError(f"batch of {len(body)} bytes exceeds {self.max_message_bytes}")
        out = Outgoing(RequestCode.SEND_BATCH_MESSAGE, body, "", unique_ids)
        return await self._send_with_retries(topic, out, None, None, Message(topic, b""), queue, False)

    def _body_of(self, message: Message) -> tuple[bytes, int]:
        body = message.body
        if type(body) is not bytes:
            body = message.body_bytes
        if len(body) > self.max_message_bytes:
            raise MessageTooLargeError(f"message body of {len(body)} bytes exceeds {self.max_message_bytes}")
        if len(body) >= self.compress_over_bytes:
            return zlib.compress(body, COMPRESS_LEVEL), L.COMPRESSED_FLAG
        return body, 0

    async def _new_lane(self, topic: str) -> Lane:
        """The topic's send state, built anew (the first send, or the client instance holds a new route)."""
        validate_topic(topic)
        route = await self.instance.publish_route(topic, AUTO_CREATE_TOPIC_KEY, DEFAULT_TOPIC_QUEUE_NUMS)
        queues = route.publish_queues()
        lean = bool(queues) and self.instance.remoting.signer is None
        lane = self._lanes[topic] = Lane(route, queues, SendTemplate(self.group, topic), lean)
        return lane

    async def _send_with_retries(
        self,
        topic: str,
        out: Outgoing,
        selector: QueueSelector | None,
        arg: Any,
        message: Message,
        fixed: MessageQueue | None,
        oneway: bool,
        failed: _Failed | None = None,
    ) -> SendResult:
        """Send with the producer's retries; ``failed``: the broker, error and whether it answered, of a first
        attempt made already."""
        attempts = 1 + (0 if (selector or fixed) else self.retry_times)
        last_broker: str | None = None
        last_error: SparkmqError | None = None
        first = 0
        if failed is not None:
            last_broker, last_error, answered = failed
            log_failed(last_broker, 0, attempts, last_error, answered)
            first = 1
        for attempt in range(first, attempts):
            if attempt > 0:
                self.instance.routes.pop(topic, None)
            lane = self._lanes.get(topic)  # cached (no await) until the route changes
            if lane is None or self.instance.routes.get(topic) is not lane.route:
                lane = await self._new_lane(topic)
            if not lane.queues:  # e.g. between a master's death and its successor's registration
                self.instance.routes.pop(topic, None)  # the next attempt (or send) asks the NameServers again
                last_error = RemoteError(f"topic {topic} has no writable queue", retriable=True)
                continue
            if fixed is not None:
                queue = fixed
            elif selector is not None:
                queue = selector(lane.queues, message, arg)
            else:
                queue = self._pick(lane.queues, last_broker)
            started = time.monotonic()
            try:
                connection = lane.connections.get(queue.broker_name)
                if connection is None or not connection.is_open:
                    connection = await self._connect(lane, queue.broker_name)
                opaque = connection.next_opaque()
                signer = self.instance.remoting.signer
                born_ms = int(time.time() * 1000)
                head = (
                    lane.template.head(out, queue.queue_id, opaque, born_ms, oneway)
                    if signer is None
                    else lane.template.signed_head(out, queue.queue_id, opaque, born_ms, oneway, signer)
                )
                if oneway:
                    connection.write_frame(head, out.body)
                    return SendResult(SendStatus.SEND_OK, out.unique_id, "", queue, -1)
                response = await connection.request_frame(opaque, out.code, head, out.body, self.send_timeout_s)
            except RemoteError as exc:
                self.faults.record(queue.broker_name, 0, failed=True)
                last_broker, last_error = queue.broker_name, exc
                log_failed(last_broker, attempt, attempts, exc, False)
                continue
            self.faults.succeeded(queue.broker_name, (time.monotonic() - started) * 1000)
            outcome = answer_outcome(response, out.unique_id, queue, topic)
            if type(outcome) is SendResult:
                return outcome
            last_broker, last_error = queue.broker_name, outcome
            log_failed(last_broker, attempt, attempts, outcome, True)
        assert last_error is not None
        raise last_error

    async def _connect(self, lane: Lane, broker_name: str) -> ClientConnection:
        address = lane.route.master_address(broker_name) or self.instance.broker_address(broker_name)
        # every connection of a RemotingClient is a ClientConnection
        connection = lane.connections[broker_name] = cast(
            ClientConnection, await self.instance.remoting.connection(address)
        )
        return connection

    def _pick(self, queues: list[MessageQueue], avoid: str | None) -> MessageQueue:
        """Round-robin, skipping brokers marked unavailable and the one that just failed: the first queue
        from the counter's on a usable broker, else the counter's own (RocketMQ's per-queue loop, with each
        broker asked once per pick, not once per queue: a thousand queues of one paused broker were a
        thousand clock reads per send)."""
        start = next(self._counter)
        count = len(queues)
        if self._brokers_for is not queues:  # a lane's queue list lives as long as its route
            self._brokers_for, self._brokers = queues, tuple(dict.fromkeys(q.broker_name for q in queues))
        usable = [name for name in self._brokers if name != avoid and self.faults.is_available(name)]
        if usable and len(usable) < len(self._brokers):
            for i in range(count):  # at most one run of a refused broker's queues
                queue = queues[(start + i) % count]
                if queue.broker_name in usable:
                    return queue
        return queues[start % count]


class Producer:
    """The blocking producer: ``AsyncProducer`` run on the process's client loop.

    For example::

        with Producer("PID_orders", "127.0.0.1:9876") as producer:
            producer.send(Message("orders", b"hello")).queue_offset
    """

    def __init__(self, group: str, namesrv_addr: str, **options: Any) -> None:
        self._async = AsyncProducer(group, namesrv_addr, **options)

    def start(self) -> None:
        loop_thread.run(self._async.start())

    def close(self) -> None:
        loop_thread.run(self._async.close())

    def __enter__(self) -> Producer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def send(
        self,
        message: Message,
        *,
        selector: QueueSelector | None = None,
        arg: Any = None,
        queue: MessageQueue | None = None,
        timeout_s: float | None = None,
    ) -> SendResult:
        """Send and wait for the broker's acknowledgement; raises as :meth:`AsyncProducer.send`."""
        if selector is not None or queue is not None:
            return loop_thread.run(self._async.send(message, selector=selector, arg=arg, queue=queue), timeout_s)
        outcome: loop_thread.Handoff[SendResult] = loop_thread.Handoff()
        loop_thread.background_loop().call_soon_threadsafe(self._async.start_send, message, outcome)
        return outcome.result(timeout_s)

    def send_async(
        self, message: Message, callback: Callable[[Future[SendResult]], None] | None = None
    ) -> Future[SendResult]:
        """Send without waiting; the future (and ``callback``, given the future) completes on acknowledgement.

        The future fails with :class:`DurabilityNotConfirmedError` as :meth:`AsyncProducer.send` raises it.
        """
        future: Future[SendResult] = Future()
        loop_thread.background_loop().call_soon_threadsafe(self._async.start_send, message, future)
        if callback is not None:
            future.add_done_callback(callback)
        return future

    def send_oneway(self, message: Message) -> None:
        """Send without any acknowledgement."""
        loop_thread.run(self._async.send(message, oneway=True))

    def send_batch(self, messages: Sequence[Message], *, queue: MessageQueue | None = None) -> SendResult:
        """Send messages of one topic as one batch and wait for the acknowledgement; raises as :meth:`send`."""
        return loop_thread.run(self._async.send_batch(messages, queue=queue))
