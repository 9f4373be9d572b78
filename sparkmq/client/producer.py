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

import itertools
import logging
import time
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from sparkmq.client import loop_thread
from sparkmq.client.fault import LatencyFaultTolerance
from sparkmq.client.instance import ClientInstance, check_response
from sparkmq.client.message import Message, SendResult, SendStatus
from sparkmq.errors import DurabilityNotConfirmedError, MessageError, MessageTooLargeError, RemoteError, SparkmqError
from sparkmq.message import layout as L
from sparkmq.message.batch import encode_batch_items
from sparkmq.message.hashing import java_string_hash
from sparkmq.message.msgid import UniqueIdGenerator
from sparkmq.message.names import AUTO_CREATE_TOPIC_KEY
from sparkmq.message.record import validate_topic
from sparkmq.protocol import RequestCode, ResponseCode
from sparkmq.protocol.bodies import MessageQueue
from sparkmq.protocol.headers import SendMessageRequestHeaderV2, SendMessageResponseHeader

logger = logging.getLogger(__name__)
COMPRESS_OVER_BYTES = 4096  # compressMsgBodyOverHowmuch
COMPRESS_LEVEL = 5
DEFAULT_TOPIC_QUEUE_NUMS = 4
# Answers that mean "stored, but not as durably as promised": not delivered, retried.
_NOT_CONFIRMED_CODES = (ResponseCode.FLUSH_DISK_TIMEOUT, ResponseCode.FLUSH_SLAVE_TIMEOUT, ResponseCode.SLAVE_NOT_AVAILABLE)

QueueSelector = Callable[[list[MessageQueue], Message, Any], MessageQueue]


def select_by_hash(queues: list[MessageQueue], message: Message, arg: Any) -> MessageQueue:
    """Ordered messages: the same ``arg`` always picks the same queue, the very queue Java's
    ``SelectMessageQueueByHash`` picks (``abs(arg.hashCode() % n)``: ``String.hashCode`` for a
    string, the value of an int, ``Long.hashCode`` past 32 bits), so Java and Python producers
    sharing keys keep per-key order.

    >>> queues = [MessageQueue("T", "b", i) for i in range(8)]
    >>> [select_by_hash(queues, None, key).queue_id for key in ("order-1", 7, -9)]
    [6, 7, 1]
    """
    return queues[abs(_java_hash_code(arg)) % len(queues)]


def _java_hash_code(arg: Any) -> int:
    if isinstance(arg, int) and not isinstance(arg, bool):
        if -(2**31) <= arg < 2**31:
            return arg
        bits = arg & 0xFFFFFFFFFFFFFFFF
        folded = (bits ^ (bits >> 32)) & 0xFFFFFFFF
        return folded - (1 << 32) if folded & 0x80000000 else folded
    return java_string_hash(str(arg))


class AsyncProducer:
    """Sends messages from asyncio code.

    For example::

        async with AsyncProducer("PID_orders", "127.0.0.1:9876") as producer:
            result = await producer.send(Message("orders", b"hello", tags="books"))
    """

    def __init__(self, group: str, namesrv_addr: str, *, retry_times_when_send_failed: int = 2,
                 send_timeout_s: float = 3.0, compress_over_bytes: int = COMPRESS_OVER_BYTES,
                 max_message_bytes: int = L.DEFAULT_MAX_MESSAGE_BYTES, instance_name: str | None = None) -> None:
        self.group = group
        self.instance = ClientInstance(namesrv_addr, instance_name)
        self.retry_times = retry_times_when_send_failed
        self.send_timeout_s = send_timeout_s
        self.compress_over_bytes = compress_over_bytes
        self.max_message_bytes = max_message_bytes
        self.faults = LatencyFaultTolerance()
        self._ids = UniqueIdGenerator()
        self._counter = itertools.count()

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

    async def send(self, message: Message, *, selector: QueueSelector | None = None, arg: Any = None,
                   queue: MessageQueue | None = None, oneway: bool = False) -> SendResult:
        """Send one message; with ``selector``/``arg`` (ordered messages) or ``queue`` the queue is fixed.

        Returns a ``SEND_OK`` result once the broker stored the message as promised. Raises
        :class:`DurabilityNotConfirmedError` when every attempt was answered FLUSH_DISK_TIMEOUT,
        FLUSH_SLAVE_TIMEOUT or SLAVE_NOT_AVAILABLE (the message may be stored; sending it again
        is safe for at-least-once), and the error tree's other exceptions for other failures.
        """
        validate_topic(message.topic)
        body, sys_flag = self._body_of(message)
        unique_id = self._ids.next_id()
        props = message.encoded_properties(unique_id)
        header = self._header(message.topic, sys_flag, props, message.flag)
        code = RequestCode.SEND_MESSAGE_V2
        return await self._send_with_retries(message.topic, code, header, body, unique_id, selector, arg, message,
                                              queue, oneway)

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
        ids = [self._ids.next_id() for _ in messages]
        body = encode_batch_items([m.body_bytes for m in messages], [m.encoded_properties(i) for m, i in zip(messages, ids, strict=True)],
                                  [m.flag for m in messages])
        if len(body) > self.max_message_bytes:
            raise MessageTooLargeError(f"batch of {len(body)} bytes exceeds {self.max_message_bytes}")
        header = self._header(topic, 0, b"", 0, batch=True)
        return await self._send_with_retries(topic, RequestCode.SEND_BATCH_MESSAGE, header, body, ",".join(ids), None,
                                              None, messages[0], queue, False)

    async def send_encoded_batch(self, topic: str, body: bytes, queue: MessageQueue, unique_ids: str = "") -> SendResult:
        """Send items already encoded as a SEND_BATCH_MESSAGE body (``encode_batch_items``' bytes) to ``queue``.

        For callers that encode many items in bulk (the Spark sink builds them from Arrow columns);
        ``send_batch`` does the same from ``Message`` objects.
        """
        validate_topic(topic)
        if len(body) > self.max_message_bytes:
            raise MessageTooLargeError(f"batch of {len(body)} bytes exceeds {self.max_message_bytes}")
        header = self._header(topic, 0, b"", 0, batch=True)
        return await self._send_with_retries(topic, RequestCode.SEND_BATCH_MESSAGE, header, body, unique_ids, None,
                                              None, Message(topic, b""), queue, False)

    def _body_of(self, message: Message) -> tuple[bytes, int]:
        body = message.body_bytes
        if len(body) > self.max_message_bytes:
            raise MessageTooLargeError(f"message body of {len(body)} bytes exceeds {self.max_message_bytes}")
        if len(body) >= self.compress_over_bytes:
            return zlib.compress(body, COMPRESS_LEVEL), L.COMPRESSED_FLAG
        return body, 0

    def _header(self, topic: str, sys_flag: int, props: bytes, flag: int, batch: bool = False) -> SendMessageRequestHeaderV2:
        return SendMessageRequestHeaderV2(self.group, topic, AUTO_CREATE_TOPIC_KEY, DEFAULT_TOPIC_QUEUE_NUMS, 0, sys_flag,
                                          int(time.time() * 1000), flag, props.decode("utf-8"), 0, False, None, batch)

    async def _send_with_retries(self, topic: str, code: int, header: SendMessageRequestHeaderV2, body: bytes,
                                 unique_id: str, selector: QueueSelector | None, arg: Any, message: Message,
                                 fixed: MessageQueue | None, oneway: bool) -> SendResult:
        attempts = 1 + (0 if (selector or fixed) else self.retry_times)
        last_broker: str | None = None
        last_error: SparkmqError | None = None
        for attempt in range(attempts):
            if attempt > 0:
                self.instance.routes.pop(topic, None)
            route = await self.instance.publish_route(topic, AUTO_CREATE_TOPIC_KEY, DEFAULT_TOPIC_QUEUE_NUMS)
            queues = route.publish_queues()
            if not queues:
                raise RemoteError(f"topic {topic} has no writable queue", retriable=True)
            if fixed is not None:
                queue = fixed
            elif selector is not None:
                queue = selector(queues, message, arg)
            else:
                queue = self._pick(queues, last_broker)
            fields = dict(header.to_fields(), e=str(queue.queue_id))
            started = time.monotonic()
            try:
                if oneway:
                    await self.instance.remoting.invoke_oneway(self.instance.broker_address(queue.broker_name), code, fields, body)
                    return SendResult(SendStatus.SEND_OK, unique_id, "", queue, -1)
                response = await self.instance.invoke_broker(queue.broker_name, code, fields, body, self.send_timeout_s)
            except RemoteError as exc:
                self.faults.record(queue.broker_name, 0, failed=True)
                last_broker, last_error = queue.broker_name, exc
                logger.warning("send to %s failed (attempt %d/%d): %s", queue.broker_name, attempt + 1, attempts, exc.remark)
                continue
            self.faults.record(queue.broker_name, (time.monotonic() - started) * 1000)
            if response.code != ResponseCode.SUCCESS:
                error = _send_error(response, topic)
                if not error.retriable:
                    raise error
                logger.warning("send to %s not acknowledged (attempt %d/%d): %s", queue.broker_name, attempt + 1,
                               attempts, error.remark)
                last_broker, last_error = queue.broker_name, error
                continue
            result = SendMessageResponseHeader.from_fields(response.ext_fields)
            return SendResult(SendStatus.SEND_OK, unique_id, result.msg_id, queue, result.queue_offset)
        assert last_error is not None
        raise last_error

    def _pick(self, queues: list[MessageQueue], avoid: str | None) -> MessageQueue:
        """Round-robin, skipping brokers marked unavailable and the one that just failed."""
        start = next(self._counter)
        for i in range(len(queues)):
            queue = queues[(start + i) % len(queues)]
            if queue.broker_name != avoid and self.faults.is_available(queue.broker_name):
                return queue
        return queues[start % len(queues)]


def _send_error(response: Any, topic: str) -> SparkmqError:
    if response.code in _NOT_CONFIRMED_CODES:
        status = ResponseCode(response.code).name
        return DurabilityNotConfirmedError(f"send to {topic}: the broker answered {status} ({response.remark or 'no remark'});"
                                           " the message is not confirmed as stored", code=response.code, status=status)
    try:
        check_response(response, f"send to {topic}")
    except SparkmqError as exc:
        return exc
    return RemoteError(f"send to {topic}: unexpected code {response.code}")


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

    def send(self, message: Message, *, selector: QueueSelector | None = None, arg: Any = None,
             queue: MessageQueue | None = None, timeout_s: float | None = None) -> SendResult:
        """Send and wait for the broker's acknowledgement; raises as :meth:`AsyncProducer.send`."""
        return loop_thread.run(self._async.send(message, selector=selector, arg=arg, queue=queue), timeout_s)

    def send_async(self, message: Message, callback: Callable[[Future[SendResult]], None] | None = None) -> Future[SendResult]:
        """Send without waiting; the future (and ``callback``, given the future) completes on acknowledgement.

        The future fails with :class:`DurabilityNotConfirmedError` as :meth:`AsyncProducer.send` raises it.
        """
        future = loop_thread.submit(self._async.send(message))
        if callback is not None:
            future.add_done_callback(callback)
        return future

    def send_oneway(self, message: Message) -> None:
        """Send without any acknowledgement."""
        loop_thread.run(self._async.send(message, oneway=True))

    def send_batch(self, messages: Sequence[Message], *, queue: MessageQueue | None = None) -> SendResult:
        """Send messages of one topic as one batch and wait for the acknowledgement; raises as :meth:`send`."""
        return loop_thread.run(self._async.send_batch(messages, queue=queue))

