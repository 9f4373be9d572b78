"""Producers: ``AsyncProducer`` (asyncio) and ``Producer`` (blocking, same behaviour).

Every send (single, async, oneway, batch) is one :class:`~sparkmq.client.send_call.SendCall`: round-robin
over the topic's writable queues, avoiding brokers that recently failed or were slow;
``retry_times_when_send_failed`` further attempts go to another broker (``retry_timeout_s``: then
retriable failures are tried again, with a fresh route, for up to that long). A send returns only when
the broker stored the message as promised: FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT and
SLAVE_NOT_AVAILABLE answers are retried like failures and, when every attempt got one, raise
:class:`DurabilityNotConfirmedError` (retriable, ``status`` names the answer); never a "delivered"
result. Bodies of 4 KiB or more are zlib-compressed with RocketMQ's flag. ``send_batch`` encodes the
whole batch into one SEND_BATCH_MESSAGE frame: one write, one acknowledgement.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import time
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from json.encoder import encode_basestring
from typing import Any, cast

from sparkmq.client import loop_thread, trace_hooks
from sparkmq.client.fault import LatencyFaultTolerance
from sparkmq.client.instance import ClientInstance
from sparkmq.client.message import WAIT_FALSE_PREFIX, WAIT_TRUE_PREFIX, Message, SendResult
from sparkmq.client.queue_select import QueueSelector
from sparkmq.client.security import ClientSecurity
from sparkmq.client.send_call import Lane, SendCall, SendIds
from sparkmq.client.send_frames import DEFAULT_TOPIC_QUEUE_NUMS, PLAIN_JSON, SendTemplate
from sparkmq.client.send_outcome import SendCallback, SendFuture, complete, sent_result
from sparkmq.client.trace_dispatcher import GROUP_PREFIX, INSTANCE_NAME, MAX_MESSAGE_BYTES, TraceDispatcher
from sparkmq.errors import MessageError, MessageTooLargeError
from sparkmq.message import layout as L
from sparkmq.message.batch import encode_batch_items
from sparkmq.message.names import AUTO_CREATE_TOPIC_KEY
from sparkmq.message.record import validate_topic
from sparkmq.protocol import RequestCode
from sparkmq.protocol.bodies import MessageQueue
from sparkmq.remoting.client_connection import ClientConnection

logger = logging.getLogger(__name__)
COMPRESS_OVER_BYTES = 4096  # compressMsgBodyOverHowmuch
COMPRESS_LEVEL = 5
_SEND_V2 = int(RequestCode.SEND_MESSAGE_V2)  # a plain int: an int's comparison is the interpreter's fast one
_SEND_BATCH = RequestCode.SEND_BATCH_MESSAGE
_time_ns = time.time_ns


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
        retry_timeout_s: float = 0.0,
        compress_over_bytes: int = COMPRESS_OVER_BYTES,
        max_message_bytes: int = L.DEFAULT_MAX_MESSAGE_BYTES,
        instance_name: str | None = None,
        security: ClientSecurity | None = None,
        enable_msg_trace: bool = False,
        customized_trace_topic: str | None = None,
    ) -> None:
        self.group = group
        self.instance = ClientInstance(namesrv_addr, instance_name, security=security)
        self.retry_times = retry_times_when_send_failed
        self.send_timeout_s = send_timeout_s
        self.retry_timeout_s = retry_timeout_s
        self.compress_over_bytes = compress_over_bytes
        self.max_message_bytes = max_message_bytes
        self.faults = LatencyFaultTolerance()
        self._ids = SendIds()
        # A random first queue, as Java's ThreadLocalIndex: short-lived producers (one CLI send each) spread out.
        self._counter = itertools.count(random.randrange(1 << 31))
        self._brokers_for: list[MessageQueue] | None = None  # the queue list _pick last saw, and its brokers
        self._brokers: tuple[str, ...] = ()
        self._lanes: dict[str, Lane] = {}
        self._routes = self.instance.routes  # read per send: the same dict for the instance's life
        self._plain_below = min(compress_over_bytes, max_message_bytes + 1)  # a bytes body this short goes as is
        # the loop start() ran on, read per send: asyncio.get_running_loop() costs a getpid() per call
        self._loop: asyncio.AbstractEventLoop | None = None
        self._preparing: set[asyncio.Task[None]] = set()  # sends waiting for a route or a connection
        self.tracer: TraceDispatcher | None = None
        if enable_msg_trace:
            self.tracer = trace_dispatcher(group, "PRODUCER", namesrv_addr, customized_trace_topic, security)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.instance.producer_groups.add(self.group)
        await self.instance.start()
        if self.tracer is not None:
            await self.tracer.start()

    async def close(self) -> None:
        if self.tracer is not None:
            await self.tracer.close()
        await self.instance.close()

    async def __aenter__(self) -> AsyncProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def send(
        self,
        message: Message,
        *,
        selector: QueueSelector | None = None,
        arg: Any = None,
        queue: MessageQueue | None = None,
        oneway: bool = False,
    ) -> SendResult:
        """Send one message; with ``selector``/``arg`` (ordered messages) or ``queue`` the queue is fixed.

        Returns a ``SEND_OK`` result once the broker stored the message as promised. Raises
        :class:`DurabilityNotConfirmedError` when every attempt was answered FLUSH_DISK_TIMEOUT,
        FLUSH_SLAVE_TIMEOUT or SLAVE_NOT_AVAILABLE (the message may be stored; sending it again
        is safe for at-least-once), and the error tree's other exceptions for other failures.
        """
        future: asyncio.Future[SendResult] = (self._loop or asyncio.get_running_loop()).create_future()
        call = self._start(message, future, None, selector, arg, queue, oneway)
        try:
            return await future
        except BaseException:
            if call is not None and (future.cancel() or future.cancelled()):
                call.forget()  # cancelled, closed or thrown into: nobody waits for the answer, no retry follows
            raise

    def send_async(
        self, message: Message, callback: Callable[[asyncio.Future[SendResult]], None] | None = None
    ) -> asyncio.Future[SendResult]:
        """Send without awaiting, from the producer's loop (Java's ``send(msg, SendCallback)``): the
        future completes when the broker acknowledged, or fails as :meth:`send` raises, and then
        ``callback`` is called with it. A send in flight costs no Task and no coroutine: the answer
        completes the future, and calls ``callback``, inside the connection's read.

        Example (a window of 128 in flight, as a pipelining publisher keeps it)::

            window = asyncio.Semaphore(128)
            for message in messages:
                await window.acquire()
                producer.send_async(message, lambda done: window.release())
        """
        future: asyncio.Future[SendResult] = (self._loop or asyncio.get_running_loop()).create_future()
        self._start(message, future, callback)
        return future

    def start_send(self, message: Message, done: Future[SendResult] | loop_thread.Handoff[SendResult]) -> None:
        """:meth:`send` for a caller on another thread (the blocking ``Producer``): completes ``done`` as
        ``send`` would return or raise; call it on the producer's loop."""
        if done.set_running_or_notify_cancel():
            self._start(message, done, None)

    def _start(
        self,
        message: Message,
        future: SendFuture,
        callback: SendCallback | None,
        selector: QueueSelector | None = None,
        arg: Any = None,
        queue: MessageQueue | None = None,
        oneway: bool = False,
    ) -> SendCall | None:
        """Start sending ``message``; ``future`` (then ``callback``) gets its outcome (None: it has it already)."""
        if self.tracer is not None and not oneway and self.tracer.traces(message.topic):
            callback = self._traced(message, callback, _time_ns() // 1_000_000)
        try:
            body = message.body
            if type(body) is bytes and len(body) < self._plain_below:
                sys_flag = 0
            else:
                body, sys_flag = self._body_of(message)
            born_ms = _time_ns() // 1_000_000
            ids = self._ids
            if born_ms != ids.head_ms:
                ids.renew(born_ms)
            tail = next(ids.counter)
            if message.properties or message.tags or message.keys or message.delay_level > 0:
                head, tail = f"{ids.head}{tail:04X}", -1
                escaped = encode_basestring(message.properties_text(head))
            else:  # a plain message: the C render writes the id's last digits (SendTemplate.frame's id_tail)
                head, escaped = ids.head, PLAIN_JSON[message.wait_store_ok]
            call = SendCall()  # its fields stored here: no constructor's frame
            call.producer = self
            call.code = _SEND_V2
            call.topic = message.topic
            call.body = body
            call.properties_json = escaped
            call.id_head = head
            call.id_tail = tail
            call.sys_flag = sys_flag
            call.flag = message.flag
            call.born_ms = born_ms
            call.future = future
            call.callback = callback
            call.plain = True
            if selector is not None or queue is not None:
                call.route_to(selector, arg, message, queue)
            if oneway:
                call.one_way()
        except Exception as exc:  # noqa: BLE001 - the caller's future carries every failure
            complete(future, callback, error=exc)
            return None
        call.go()
        return call

    def _traced(self, message: Message, callback: SendCallback | None, started_ms: int) -> SendCallback:
        """``callback`` preceded by the Pub trace of an acknowledged send (Java's ``SendMessageTraceHookImpl``)."""

        def traced(future: Any) -> None:
            result = sent_result(future)
            if result is not None and self.tracer is not None:
                try:
                    host = self.instance.broker_address(result.queue.broker_name)
                    self.tracer.append(trace_hooks.pub(self.group, message, result, started_ms, host))
                except Exception:  # a trace never fails the send it traces
                    logger.exception("message trace of %s failed", result.msg_id)
            if callback is not None:
                callback(future)

        return traced

    async def send_prepared(
        self,
        topic: str,
        code: int,
        body: bytes,
        properties: str,
        unique_id: str,
        sys_flag: int = 0,
        flag: int = 0,
        queue: MessageQueue | None = None,
    ) -> SendResult:
        """Send a request whose body and properties text are made (a batch, a transaction's half message),
        to ``queue`` when given (then once, never retried elsewhere); errors as :meth:`send`."""
        future: asyncio.Future[SendResult] = asyncio.get_running_loop().create_future()
        born_ms = _time_ns() // 1_000_000
        escaped = encode_basestring(properties)
        call = SendCall.prepared(self, topic, code, body, escaped, unique_id, sys_flag, flag, born_ms, future)
        if queue is not None:
            call.route_to(None, None, Message(topic, b""), queue)
        call.go()
        return await future

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
        return await self.send_prepared(topic, _SEND_BATCH, body, "", unique_ids, queue=queue)

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
        template = SendTemplate(self.group, topic)
        lane = self._lanes[topic] = Lane(route, route.publish_queues(), template, self.instance.remoting.signer)
        return lane

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


_trace_counter = itertools.count(1)


def trace_dispatcher(
    group: str, kind: str, namesrv_addr: str, topic: str | None, security: ClientSecurity | None
) -> TraceDispatcher:
    """The trace dispatcher of a traced client, with its own producer (``AsyncTraceDispatcher``'s names)."""
    producer = AsyncProducer(
        f"{GROUP_PREFIX}-{group}-{kind}-{next(_trace_counter)}",
        namesrv_addr,
        send_timeout_s=5.0,
        max_message_bytes=MAX_MESSAGE_BYTES,
        instance_name=f"{INSTANCE_NAME}_{namesrv_addr}",
        security=security,
    )
    return TraceDispatcher(producer, topic)


class Producer:
    """The blocking producer: ``AsyncProducer`` run on the process's client loop.

    For example::

        with Producer("PID_orders", "127.0.0.1:9876") as producer:
            producer.send(Message("orders", b"hello")).queue_offset
    """

    def __init__(self, group: str, namesrv_addr: str, **options: Any) -> None:
        self._async = AsyncProducer(group, namesrv_addr, **options)

    @property
    def tracer(self) -> TraceDispatcher | None:
        """The trace dispatcher (``enable_msg_trace``): its ``sent``, ``failed`` and ``dropped`` counts."""
        return self._async.tracer

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
